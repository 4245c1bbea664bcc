"""Images and documents in a conversation: what a face decodes an image or document part into.

A ``Media`` item is the bytes of one image (or PDF document), held once, known by their SHA-256
``digest`` and by the media type their first bytes say they are (``sniff``) — never by the type a
client declared alone. Two items with the same digest and type are equal, whatever their other
fields, so anything that keys a turn (a render cache, the prefix service) keys its images by digest,
not by their bytes. A ``Remote`` item is an ``http(s)`` URL not fetched yet (``app.media.fetch``,
opt-in with ``--media-domains``).

Decoding (``data_url``, ``base64_media``) never trusts the client: bad base64, a data URL that is
not base64, and bytes that are no image or document toolwire knows are 400s naming the part by its
place in the request (``where``: ``messages[0].content[1].image_url.url``). Plain-text documents
are not media: the face decodes them to text (``text_document``).

What happens to the items later: the chat template renders each where its turn has it
(``app.templates.prompt``), the backend's dialect says whether and how it takes them
(``app.backends.dialect.MediaInput``), and ``check_media`` bounds their count and bytes per request
(``--max-media-items``, ``--max-media-bytes``), images handed back from stored responses included.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from app.errors import APIError, bad_request

Kind = Literal["image", "document"]

#: media types by the bytes they start with (``sniff``); WebP and BMP are checked apart
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
)
IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/bmp"})
DOCUMENT_TYPES = frozenset({"application/pdf"})
#: plain-text document types a face reads as text (``text_document``)
TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/csv", "application/json"})


def sniff(data: bytes) -> str | None:
    """The media type ``data``'s first bytes say it is (``None``: none toolwire knows)."""
    for magic, media_type in _MAGIC:
        if data.startswith(magic):
            return media_type
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if len(data) >= 26 and data[:2] == b"BM" and int.from_bytes(data[14:18], "little") in (12, 40, 52, 56, 64, 108, 124):
        return "image/bmp"  # the DIB header's size: one of the known BMP header versions
    return None


@dataclass(frozen=True, slots=True)
class Media:
    """One image or document: its bytes (held once; not compared), their SHA-256 ``digest`` and
    sniffed ``media_type``; ``detail`` as the client asked (OpenAI's ``auto`` / ``low`` / ``high``,
    passed on where the backend reads it); ``where`` the part's place in the request (for errors)."""

    digest: str
    media_type: str
    data: bytes = field(compare=False, repr=False)
    detail: str | None = field(default=None, compare=False)
    where: str = field(default="", compare=False)

    @property
    def kind(self) -> Kind:
        return "document" if self.media_type in DOCUMENT_TYPES else "image"

    @property
    def size(self) -> int:
        return len(self.data)

    def base64(self) -> str:
        return base64.b64encode(self.data).decode("ascii")

    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{self.base64()}"

    @classmethod
    def of(cls, data: bytes, where: str, kind: Kind = "image", detail: str | None = None) -> Media:
        """``data`` as an item of ``kind``: its type sniffed (a 400 naming ``where`` when the bytes are
        not an image, resp. a PDF, toolwire knows)."""
        media_type = sniff(data)
        wanted = IMAGE_TYPES if kind == "image" else DOCUMENT_TYPES
        if media_type not in wanted:
            what = ("a PNG, JPEG, GIF, WebP or BMP image" if kind == "image" else "a PDF document")
            said = f"its bytes look like {media_type}" if media_type else "its bytes are of no known type"
            raise bad_request(f"{where}: not {what} ({said}; the type is read from the bytes, not from what the "
                              "request declares)", param(where), code="invalid_media")
        return cls(hashlib.sha256(data).hexdigest(), media_type, data, detail, where)


@dataclass(frozen=True, slots=True)
class Remote:
    """An ``http(s)`` URL of an image or document, not fetched yet (``app.media.fetch``)."""

    url: str
    where: str
    kind: Kind = "image"
    detail: str | None = None


#: what a turn's ``parts`` hold: text pieces, media items, remote items to fetch
Part = str | Media | Remote


def param(where: str) -> str:
    """``messages[0].content[1].image_url.url`` as OpenAI's ``param`` spells it: ``messages.0.content.1.image_url.url``."""
    return where.replace("[", ".").replace("]", "")


def decode_base64(text: str, where: str) -> bytes:
    """Standard base64 (padding optional, whitespace ignored), strictly: anything else is a 400 naming ``where``."""
    cleaned = "".join(text.split())
    try:
        data = base64.b64decode(cleaned + "=" * (-len(cleaned) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise bad_request(f"{where}: invalid base64 data", param(where), code="invalid_media") from None
    if not data:
        raise bad_request(f"{where}: the data is empty", param(where), code="invalid_media")
    return data


def split_data_url(url: str, where: str) -> tuple[str, bytes]:
    """A ``data:`` URL's declared media type and decoded bytes (only base64 data URLs are taken)."""
    head, comma, payload = url.partition(",")
    if not comma:
        raise bad_request(f"{where}: a data URL needs a comma before its data", param(where), code="invalid_media")
    attributes = head[len("data:"):].split(";")
    if "base64" not in (a.strip().lower() for a in attributes[1:]):
        raise bad_request(f"{where}: only base64 data URLs are accepted (data:<type>;base64,<data>)", param(where),
                          code="invalid_media")
    return attributes[0].strip().lower(), decode_base64(payload, where)


def media_url(url: object, where: str, kind: Kind = "image", detail: str | None = None) -> Media | Remote:
    """An image (or document) given by URL: a ``data:`` URL decoded now, an ``http(s)`` URL left to
    fetch (whether it may be fetched at all is ``check_media``'s to say); anything else a 400."""
    if not isinstance(url, str) or not url:
        raise bad_request(f"{where}: expected a URL string", param(where))
    lowered = url[:8].lower()
    if lowered.startswith("data:"):
        _declared, data = split_data_url(url, where)
        return Media.of(data, where, kind, detail)
    if lowered.startswith(("http://", "https://")):
        return Remote(url, where, kind, detail)
    scheme = url.split(":", 1)[0][:16] if ":" in url else ""
    raise bad_request(f"{where}: {'URL scheme ' + repr(scheme) if scheme else 'this value'} is not accepted: send a "
                      "base64 data URL (data:image/png;base64,…) or, where the server allows fetching, an http(s) "
                      "URL", param(where), code="invalid_media")


def base64_media(data: object, where: str, kind: Kind = "image") -> Media:
    """Base64 bytes given apart from their type (Anthropic's ``source.data``): decoded and sniffed."""
    if not isinstance(data, str):
        raise bad_request(f"{where}: expected a base64 string", param(where))
    return Media.of(decode_base64(data, where), where, kind)


def text_document(data: bytes, where: str) -> str:
    """A plain-text document's text (UTF-8; a 400 naming ``where`` when it is not)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise bad_request(f"{where}: a text document must be UTF-8", param(where), code="invalid_media") from None


def items(parts: Iterable[Part]) -> Iterator[Media | Remote]:
    """The media items among ``parts``, in order."""
    for part in parts:
        if not isinstance(part, str):
            yield part


def joined_text(parts: Iterable[Part], separator: str = "") -> str:
    """The text pieces of ``parts`` joined (what a text-only reading of the turn sees)."""
    return separator.join(p for p in parts if isinstance(p, str))


class MediaRefused(APIError):
    """A request's media that this server or backend cannot take (a 400 that says why)."""

    def __init__(self, message: str, where: str = "", code: str = "unsupported_media") -> None:
        super().__init__(400, message, "invalid_request_error", param(where) if where else None, code)


def file_url(url: object, where: str) -> Part:
    """A file given as a data URL or ``http(s)`` URL (Chat's ``file``, Responses' ``input_file``): a
    plain-text file is its text; a PDF (or an image) is a media item, by what its bytes are."""
    if isinstance(url, str) and url[:5].lower() == "data:":
        declared, data = split_data_url(url, where)
        if declared in TEXT_TYPES or declared.startswith("text/"):
            return text_document(data, where)
        return Media.of(data, where, "image" if sniff(data) in IMAGE_TYPES else "document")
    return media_url(url, where, "document")


def file_data(data: object, where: str) -> Part:
    """A file's data as OpenAI's ``file_data`` holds it: a data URL, or bare base64 (typed by its bytes)."""
    if isinstance(data, str) and data[:5].lower() != "data:":
        raw = decode_base64(data, where)
        return Media.of(raw, where, "image" if sniff(raw) in IMAGE_TYPES else "document")
    if not isinstance(data, str):
        raise bad_request(f"{where}: expected a data URL or base64 string", param(where))
    return file_url(data, where)


def no_file_ids(where: str) -> APIError:
    return bad_request(f"{where}: files by id are not supported (this server has no Files API); send the file's "
                       "data", param(where), code="unsupported_media")
