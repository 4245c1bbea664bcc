"""A request's media bounded, and its ``http(s)`` images fetched — only where the server allows it.

Fetching a URL a client names is a server-side request forgery door, so it is off unless the
operator opens it, and then narrow (``--media-domains`` and the flags beside it):

* only hosts on the allow-list (``example.com`` is that host, ``*.example.com`` its subdomains,
  ``*`` any host) and only ``http`` / ``https``;
* the host's name is resolved here, every address it resolves to is checked — private, loopback,
  link-local, shared, reserved and multicast addresses are refused unless ``--media-allow-private``
  — and the connection goes to the address checked (the name is sent as ``Host`` and as TLS SNI,
  and the certificate is verified against it), so a second resolution cannot swap the address;
* no proxy from the environment; a redirect is followed (at most ``MAX_REDIRECTS``) only to the
  same host and scheme, checked again; anything else is a 400 naming the part;
* the whole fetch has ``--media-fetch-timeout`` seconds, and reads at most what is left of the
  request's ``--max-media-bytes`` (a ``Content-Length`` beyond it is refused before the body is read).

``resolve_media`` applies the per-request bounds — at most ``--max-media-items`` items and
``--max-media-bytes`` decoded bytes, images handed back from stored responses and conversations
included — and replaces each ``Remote`` item of the conversation by the ``Media`` fetched for it.
A fetched item's type is sniffed from its bytes like any other (``Media.of``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Self

import httpx

from app.media import Media, MediaRefused, Remote

if TYPE_CHECKING:
    from app.pipeline.ask import Ask
    from app.settings import Settings

MAX_REDIRECTS = 3


async def resolve_host(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (the system resolver, off the event loop)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def host_allowed(host: str, domains: Sequence[str]) -> bool:
    """Whether ``host`` is on the allow-list (see the module docstring)."""
    host = host.lower().rstrip(".")
    for entry in domains:
        entry = entry.strip().lower().rstrip(".")
        if entry == "*" or entry == host or (entry.startswith("*.") and host.endswith(entry[1:])):
            return True
    return False


def address_refused(address: str) -> str | None:
    """Why a connection to ``address`` is refused by default (``None``: it is a public address)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    for test, what in ((ip.is_loopback, "loopback"), (ip.is_link_local, "link-local"), (ip.is_multicast, "multicast"),
                       (ip.is_unspecified, "unspecified"), (ip.is_private, "private"), (ip.is_reserved, "reserved")):
        if test:
            return what
    return None if ip.is_global else "non-public"


class Fetcher:
    """Fetches the remote items of one request under the server's rules (see the module docstring)."""

    def __init__(self, settings: Settings) -> None:
        self.domains = list(settings.media_domains)
        self.allow_private = settings.media_allow_private
        self.timeout = settings.media_fetch_timeout
        self._client: httpx.AsyncClient | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._client is not None:
            await self._client.aclose()

    def refuse(self, item: Remote, why: str) -> MediaRefused:
        return MediaRefused(f"{item.where}: {why}", item.where, code="media_fetch_refused")

    async def fetch(self, item: Remote, limit: int) -> bytes:
        """The bytes at ``item.url`` (at most ``limit`` of them), or a 400 naming the part."""
        if not self.domains:
            raise self.refuse(item, "this server does not fetch image URLs (no --media-domains); send the image as a "
                              "base64 data URL instead")
        try:
            async with asyncio.timeout(self.timeout):
                return await self._fetch(item, limit)
        except TimeoutError:
            raise self.refuse(item, f"fetching the URL took longer than {self.timeout:g} s "
                              "(--media-fetch-timeout)") from None
        except httpx.HTTPError as exc:
            raise self.refuse(item, f"fetching the URL failed ({type(exc).__name__})") from None

    async def _fetch(self, item: Remote, limit: int) -> bytes:
        url = httpx.URL(item.url)
        origin = (url.scheme, url.host, url.port)
        for _hop in range(MAX_REDIRECTS + 1):
            address = await self._address(item, url)
            response = await self._send(url, address)
            try:
                if response.is_redirect:
                    location = response.headers.get("location", "")
                    url = url.join(location)
                    if (url.scheme, url.host, url.port) != origin:
                        raise self.refuse(item, "the URL redirects to another host or scheme, which is not followed")
                    continue
                if response.status_code != 200:
                    raise self.refuse(item, f"fetching the URL answered HTTP {response.status_code}")
                return await self._read(item, response, limit)
            finally:
                await response.aclose()
        raise self.refuse(item, f"the URL redirects more than {MAX_REDIRECTS} times")

    async def _address(self, item: Remote, url: httpx.URL) -> str:
        if url.scheme not in ("http", "https") or not url.host:
            raise self.refuse(item, "only http and https URLs are fetched")
        if not host_allowed(url.host, self.domains):
            raise self.refuse(item, f"the host {url.host!r} is not one this server fetches from (--media-domains)")
        try:
            addresses = await resolve_host(url.host, url.port or (443 if url.scheme == "https" else 80))
        except OSError:
            raise self.refuse(item, f"the host {url.host!r} does not resolve") from None
        if not addresses:
            raise self.refuse(item, f"the host {url.host!r} does not resolve")
        if not self.allow_private:
            for address in addresses:
                why = address_refused(address)
                if why is not None:
                    raise self.refuse(item, f"the host {url.host!r} resolves to a {why} address, which is not fetched "
                                      "(--media-allow-private)")
        return addresses[0]

    async def _send(self, url: httpx.URL, address: str) -> httpx.Response:
        if self._client is None:
            self._client = httpx.AsyncClient(trust_env=False, follow_redirects=False, timeout=self.timeout)
        host = url.host
        pinned = url.copy_with(host=address)  # the address checked, not a second resolution
        request = self._client.build_request("GET", pinned, headers={"Host": url.netloc.decode("ascii"),
                                                                       "Accept": "image/*, application/pdf"},
                                             extensions={"sni_hostname": host})
        return await self._client.send(request, stream=True)

    async def _read(self, item: Remote, response: httpx.Response, limit: int) -> bytes:
        declared = response.headers.get("content-length")
        too_large = f"the image is larger than this request may still hold ({limit} bytes, --max-media-bytes)"
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise self.refuse(item, too_large)
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > limit:
                raise self.refuse(item, too_large)
            chunks.append(chunk)
        return b"".join(chunks)


async def resolve_media(ask: Ask, settings: Settings) -> None:
    """Bound ``ask``'s media and fetch its remote items (see the module docstring); the turns that
    held a remote item are replaced by copies holding what was fetched (turns are shared, never
    changed)."""
    count = size = 0
    remote = False
    for turn in ask.turns:
        for part in turn.parts:
            if isinstance(part, str):
                continue
            count += 1
            if count > settings.max_media_items:
                raise MediaRefused(f"{part.where}: more images and documents than one request may hold "
                                   f"({settings.max_media_items}, --max-media-items)", part.where, code="too_many_media")
            if isinstance(part, Remote):
                remote = True
            else:
                size += part.size
                if size > settings.max_media_bytes:
                    raise MediaRefused(f"{part.where}: the request's images and documents are larger than "
                                       f"{settings.max_media_bytes} bytes (--max-media-bytes)", part.where,
                                       code="media_too_large")
    if not remote:
        return
    fetched: dict[str, Media] = {}
    async with Fetcher(settings) as fetcher:
        turns = list(ask.turns)
        for i, turn in enumerate(turns):
            if not any(isinstance(part, Remote) for part in turn.parts):
                continue
            parts = []
            for part in turn.parts:
                if isinstance(part, Remote):
                    media = fetched.get(part.url)
                    if media is None:
                        data = await fetcher.fetch(part, settings.max_media_bytes - size)
                        media = Media.of(data, part.where, part.kind, part.detail)
                        size += media.size
                        fetched[part.url] = media
                    part = replace(media, detail=part.detail, where=part.where)
                parts.append(part)
            turns[i] = replace(turn, parts=tuple(parts), derived=None)
        ask.turns = turns
