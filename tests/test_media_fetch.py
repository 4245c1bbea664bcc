"""Fetching image URLs is opt-in and narrow (``app.media.fetch``): the allow-list, the resolved
address (never a private one unless allowed), redirects, size and time bounds — against a server on
loopback only; addresses elsewhere are only ever resolved (by a stand-in resolver), never connected to."""

from __future__ import annotations

import asyncio
import base64
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import anthropic
import openai
import pytest

from app.media import Media, MediaRefused, Remote
from app.media import fetch as media_fetch
from app.media.fetch import Fetcher, address_refused, host_allowed
from app.settings import Settings
from tests.test_images import MARKER, QWEN35, png


class _Images(BaseHTTPRequestHandler):
    routes: ClassVar[dict[str, tuple[int, dict[str, str], bytes]]] = {}
    hold = threading.Event()
    hosts: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.hosts.append(self.headers.get("Host", ""))
        if self.path == "/stall":
            self.hold.wait(30)  # released when the test ends
            return
        status, headers, body = self.routes.get(self.path, (404, {}, b"no"))
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        if "Content-Length" not in headers and status != 204:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def images() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Images)
    server.daemon_threads = True
    _Images.hold.clear()
    _Images.hosts.clear()
    port = server.server_address[1]
    _Images.routes = {
        "/cat.png": (200, {"Content-Type": "image/png"}, png(11)),
        "/hop": (302, {"Location": "/cat.png"}, b""),
        "/away": (302, {"Location": f"http://127.0.0.1:{port}/cat.png"}, b""),
        "/big": (200, {"Content-Type": "image/png"}, png() + bytes(5000)),
        "/liar": (200, {"Content-Type": "image/png", "Content-Length": "999999"}, png()),
        "/text": (200, {"Content-Type": "image/png"}, b"<html>not an image</html>"),
    }
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield port
    _Images.hold.set()
    server.shutdown()
    server.server_close()


def fetch(url: str, limit: int = 1 << 20, **settings: Any) -> bytes:
    async def run() -> bytes:
        async with Fetcher(Settings(**settings)) as fetcher:
            return await fetcher.fetch(Remote(url, "messages[0].content[1].image_url.url"), limit)
    return asyncio.run(run())


def refused(url: str, **settings: Any) -> str:
    with pytest.raises(MediaRefused) as caught:
        fetch(url, **settings)
    assert caught.value.param == "messages.0.content.1.image_url.url"
    return caught.value.message


def test_allow_list() -> None:
    assert host_allowed("img.example.com", ["*.example.com"]) and host_allowed("example.com", ["example.com"])
    assert not host_allowed("example.com.evil.net", ["*.example.com", "example.com"])
    assert not host_allowed("example.com", ["*.example.com"]) and host_allowed("anything.net", ["*"])


@pytest.mark.parametrize(("address", "why"), [
    ("127.0.0.1", "loopback"), ("10.1.2.3", "private"), ("169.254.169.254", "link-local"), ("::1", "loopback"),
    ("::ffff:192.168.0.1", "private"), ("100.64.0.1", "non-public"), ("fd00::1", "private"), ("0.0.0.0", "unspecified"),
    ("224.0.0.1", "multicast"), ("8.8.8.8", None), ("2606:4700::1", None)])
def test_addresses_refused_by_default(address: str, why: str | None) -> None:
    assert address_refused(address) == why


def test_nothing_is_fetched_without_media_domains(images: int) -> None:
    assert "no --media-domains" in refused(f"http://localhost:{images}/cat.png")
    assert _Images.hosts == []


def test_a_host_off_the_list_and_a_private_address_are_refused_before_connecting(images: int, monkeypatch) -> None:
    assert "not one this server fetches from" in refused(f"http://localhost:{images}/cat.png",
                                                         media_domains=["example.com"])
    assert "loopback address" in refused(f"http://localhost:{images}/cat.png", media_domains=["localhost"])

    async def internal(host: str, port: int) -> list[str]:  # a public-looking name that resolves inside
        return ["93.184.215.14", "10.0.0.7"]

    monkeypatch.setattr(media_fetch, "resolve_host", internal)
    assert "private address" in refused("https://images.example.com/cat.png", media_domains=["*.example.com"])
    assert _Images.hosts == []


def test_an_allowed_host_is_fetched_at_the_address_checked(images: int) -> None:
    data = fetch(f"http://localhost:{images}/cat.png", media_domains=["localhost"], media_allow_private=True)
    assert data == png(11) and _Images.hosts == [f"localhost:{images}"]
    assert fetch(f"http://localhost:{images}/hop", media_domains=["localhost"], media_allow_private=True) == png(11)


def test_redirects_elsewhere_sizes_and_time_are_bounded(images: int) -> None:
    allowed = {"media_domains": ["localhost", "127.0.0.1"], "media_allow_private": True}
    assert "another host" in refused(f"http://localhost:{images}/away", **allowed)
    with pytest.raises(MediaRefused, match="--max-media-bytes"):
        fetch(f"http://localhost:{images}/big", limit=1000, **allowed)
    with pytest.raises(MediaRefused, match="--max-media-bytes"):
        fetch(f"http://localhost:{images}/liar", limit=1000, **allowed)
    assert "--media-fetch-timeout" in refused(f"http://localhost:{images}/stall", media_fetch_timeout=0.3, **allowed)
    assert "HTTP 404" in refused(f"http://localhost:{images}/missing", **allowed)


def test_a_fetched_image_reaches_llama_server_and_its_type_is_read_from_its_bytes(
        images: int, backend_factory, proxy_factory) -> None:
    backend = backend_factory("llamacpp", vision=True, media_marker=MARKER, chat_template=QWEN35.read_text())
    proxy = proxy_factory(backend=backend.url, media_domains=["localhost"], media_allow_private=True)
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="unused", max_retries=0, timeout=30)
    url = f"http://localhost:{images}/cat.png"
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": [
        {"type": "text", "text": "Same?"}, {"type": "image_url", "image_url": {"url": url}},
        {"type": "image_url", "image_url": {"url": url}}]}])
    prompt = backend.bodies()[-1]["prompt"]
    assert [base64.b64decode(d) for d in prompt["multimodal_data"]] == [png(11), png(11)]
    assert len(_Images.hosts) == 1  # one URL, fetched once per request
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"http://localhost:{images}/text"}}]}])
    assert "not a PNG, JPEG" in caught.value.message


def test_count_tokens_fetches_an_image_url_as_the_message_would(images: int, backend_factory, proxy_factory) -> None:
    """``/v1/messages/count_tokens`` plans the prompt the message would have: a URL image is fetched
    (and bounded) there too, not a 500 for media that reached the plan unfetched."""
    backend = backend_factory("llamacpp", vision=True, media_marker=MARKER, chat_template=QWEN35.read_text())
    proxy = proxy_factory(backend=backend.url, media_domains=["localhost"], media_allow_private=True)
    client = anthropic.Anthropic(base_url=proxy.url, api_key="unused", max_retries=0, timeout=30)

    def content(path: str) -> list[dict[str, Any]]:
        return [{"type": "text", "text": "Same?"}, {"type": "image", "source": {
            "type": "url", "url": f"http://localhost:{images}/{path}"}}]

    counted = client.messages.count_tokens(model="m", messages=[{"role": "user", "content": content("cat.png")}])
    plain = client.messages.count_tokens(model="m", messages=[{"role": "user", "content": "Same?"}])
    assert counted.input_tokens > plain.input_tokens and len(_Images.hosts) == 1
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.count_tokens(model="m", messages=[{"role": "user", "content": content("text")}])
    assert "not a PNG, JPEG" in caught.value.message


def test_media_items_equal_by_digest_not_by_place() -> None:
    a, b = Media.of(png(), "here"), Media.of(png(), "there", detail="low")
    assert a == b and hash(a) == hash(b) and a != Media.of(png(1), "here")
