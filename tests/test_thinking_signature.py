"""Thinking-block signatures: what verifies, what does not, and the sealed text of omitted blocks."""

from __future__ import annotations

from app.thinking_signature import SEALED, SIGNED, ThinkingSigner

TEXT = "Étape 1 : vérifier — 東京 and Paris. 🌦"


def test_signed_text_verifies_and_edits_do_not() -> None:
    signer = ThinkingSigner(b"secret-one")
    signature = signer.sign(TEXT)
    assert signature.startswith(SIGNED)
    assert signer.recover(TEXT, signature) == TEXT
    assert signer.recover(TEXT + " ", signature) is None
    assert signer.recover(TEXT, signature[:-2] + "AA") is None
    assert ThinkingSigner(b"secret-two").recover(TEXT, signature) is None  # another key (a restart)
    assert signer.recover(TEXT, None) is None and signer.recover(TEXT, "EqQBCkgIARAB") is None


def test_streamed_mac_equals_the_whole_text_signature() -> None:
    signer = ThinkingSigner(b"k")
    mac = signer.mac()
    for piece in (TEXT[:5], TEXT[5:17], TEXT[17:]):
        mac.update(piece.encode())
    assert signer.signature(mac) == signer.sign(TEXT)


def test_sealed_text_opens_only_intact_and_with_its_key() -> None:
    signer = ThinkingSigner(b"k")
    sealed = signer.seal(TEXT)
    assert sealed.startswith(SEALED) and "Paris" not in sealed
    assert signer.seal(TEXT) != sealed  # a fresh nonce each time
    assert signer.recover("", sealed) == TEXT and signer.unseal(sealed) == TEXT
    assert signer.unseal(signer.seal("")) == ""
    body = sealed[len(SEALED):]
    flipped = body[:30] + ("A" if body[30] != "A" else "B") + body[31:]
    assert signer.unseal(SEALED + flipped) is None
    assert signer.unseal(SEALED + body[:20]) is None and signer.unseal(SEALED + "!!!") is None
    assert ThinkingSigner(b"other").unseal(sealed) is None
