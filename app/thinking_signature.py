"""Signatures on the Messages API's ``thinking`` blocks: reasoning handed back is reasoning toolwire wrote.

A client returns earlier thinking blocks with its next request, and their text reaches the chat
template as the assistant's reasoning. The signature lets toolwire check that the text is what the
model wrote, so a client cannot slip invented "prior reasoning" into the prompt:

* a shown block (``display`` not ``omitted``) is signed ``tw1.`` + HMAC-SHA256 of its text;
* an omitted block (``display: "omitted"``: no thinking text is streamed) carries its text *sealed*
  in the signature — ``tw1s.`` + nonce, the text encrypted with a SHAKE-256 keystream, and an
  HMAC-SHA256 tag over both (encrypt-then-MAC) — so the reasoning still reaches the next prompt
  while the client never sees it.

Both keys are derived from one secret (``--thinking-secret``; by default random per process, so
signatures do not survive a restart) and the API key's tenant, so a signature given to one key does
not verify for another. The policy for a block that does not verify — another
provider's signature, an edited text, a block from before a restart — is to drop its reasoning
from the prompt (the rest of the request is served); ``redacted_thinking`` blocks are opened the
same way when their ``data`` is a sealed signature of ours, and dropped otherwise.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from functools import lru_cache

from app.settings import Settings

SIGNED = "tw1."
SEALED = "tw1s."
_NONCE = 16
_TAG = 32
_PROCESS_SECRET = secrets.token_bytes(32)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes | None:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None


def _xor(data: bytes, key: bytes) -> bytes:
    return (int.from_bytes(data, "big") ^ int.from_bytes(key, "big")).to_bytes(len(data), "big")


class ThinkingSigner:
    """Signs, seals and checks thinking text with keys derived from one secret and the tenant the
    text belongs to (``app.tenancy``): what one API key's requests were given verifies for that key
    only. The single tenant of a server without keys uses the secret's keys as they are."""

    def __init__(self, secret: bytes, tenant: str = "") -> None:
        bound = b"\0" + tenant.encode() if tenant else b""
        self._mac_key = hmac.new(secret, b"toolwire thinking signature" + bound, hashlib.sha256).digest()
        self._enc_key = hmac.new(secret, b"toolwire thinking encryption" + bound, hashlib.sha256).digest()

    def mac(self) -> hmac.HMAC:
        """A running MAC for a shown block: ``update`` it with the UTF-8 text as it streams."""
        return hmac.new(self._mac_key, b"signed\0", hashlib.sha256)

    @staticmethod
    def signature(mac: hmac.HMAC) -> str:
        return SIGNED + _b64(mac.digest())

    def sign(self, text: str) -> str:
        mac = self.mac()
        mac.update(text.encode())
        return self.signature(mac)

    def _keystream(self, nonce: bytes, n: int) -> bytes:
        return hashlib.shake_256(self._enc_key + nonce).digest(n)

    def seal(self, text: str) -> str:
        """The signature of an omitted block: its text, encrypted and authenticated."""
        nonce = secrets.token_bytes(_NONCE)
        data = text.encode()
        cipher = _xor(data, self._keystream(nonce, len(data))) if data else b""
        tag = hmac.new(self._mac_key, b"sealed\0" + nonce + cipher, hashlib.sha256).digest()
        return SEALED + _b64(nonce + cipher + tag)

    def unseal(self, signature: str) -> str | None:
        raw = _unb64(signature[len(SEALED):]) if signature.startswith(SEALED) else None
        if raw is None or len(raw) < _NONCE + _TAG:
            return None
        nonce, cipher, tag = raw[:_NONCE], raw[_NONCE:-_TAG], raw[-_TAG:]
        expected = hmac.new(self._mac_key, b"sealed\0" + nonce + cipher, hashlib.sha256).digest()
        if not hmac.compare_digest(tag, expected):
            return None
        try:
            return _xor(cipher, self._keystream(nonce, len(cipher))).decode() if cipher else ""
        except UnicodeDecodeError:
            return None

    def recover(self, text: str, signature: str | None) -> str | None:
        """The reasoning a handed-back block stands for, or ``None`` when it does not verify: a sealed
        signature gives its own text; a signed one must match ``text``."""
        if not signature:
            return None
        if signature.startswith(SEALED):
            return self.unseal(signature)
        if signature.startswith(SIGNED) and hmac.compare_digest(signature.encode(), self.sign(text).encode()):
            return text
        return None


@lru_cache(maxsize=1024)
def _signer(secret: bytes, tenant: str) -> ThinkingSigner:
    return ThinkingSigner(secret, tenant)


def signer_for(settings: Settings, tenant: str = "") -> ThinkingSigner:
    """The signer for the server's ``--thinking-secret`` (the process's random secret without one)
    and ``tenant``."""
    configured = settings.thinking_secret
    return _signer(configured.get_secret_value().encode() if configured is not None else _PROCESS_SECRET, tenant)
