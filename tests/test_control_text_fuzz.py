"""The fuzz of issue 38 item 1: for every chat template in the shared collection, its own special-token
markup (``markup_of``) put into every kind of client field, on every face, against a scripted
llama-server whose vocabulary makes that markup control tokens. toolwire learns the vocabulary the
way it does from a real llama-server (``/tokenize``). The model must read exactly the template's own
control tokens — the ones it reads when the client's text holds the same markup broken by a
zero-width space (text that reads alike to a template that looks into it, ``/think`` included, but
holds no control token) — and, where the trace held, the very text the old code rendered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.templates.literal import ZW
from tests.control_text_cases import allowing, markup_of, requests, simple_requests, user_requests
from tests.proxy_server import ProxyServer
from tests.scripted_backend import SPECIAL_ID, ScriptedBackend

SHARED = Path("/work/shared/templates")
FOLDER = SHARED if SHARED.is_dir() else Path(__file__).parent / "data" / "templates"
TEMPLATES = sorted(p for p in FOLDER.glob("*.jinja") if markup_of(p.read_text(encoding="utf-8")))
FACES = ("chat", "responses", "messages")




def test_the_collection_is_there() -> None:
    assert len(TEMPLATES) >= 40, FOLDER


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[ScriptedBackend, ProxyServer]]:
    """One scripted llama-server and one proxy for every template: each test gives the backend a
    template and a vocabulary, and has the proxy probe it again (as it does a backend that was
    replaced), which is much cheaper than starting a proxy per template."""
    backend = ScriptedBackend("llamacpp").start()
    proxy = ProxyServer(backend=backend.url).start()
    yield backend, proxy
    proxy.stop()
    backend.stop()
    HTTP.close()


#: one client for the module (a client per request costs more than the request: its TLS context)
HTTP = httpx.Client(timeout=60)


def _serve(backend: ScriptedBackend, proxy: ProxyServer, source: str, specials: list[str]) -> None:
    backend.chat_template, backend.specials = source, specials
    proxy.runtime.model = None
    assert HTTP.get(proxy.url + "/health").status_code == 200


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.stem)
def test_a_template_s_own_markup_in_client_fields_stays_text(path: Path, served: tuple[ScriptedBackend, ProxyServer],
                                                             ) -> None:
    source = path.read_text(encoding="utf-8")
    specials = markup_of(source)
    backend, proxy = served
    _serve(backend, proxy, source, specials)
    assert set(specials) <= set(proxy.runtime.model.control.strings)  # all confirmed through /tokenize
    mark = "«" + "»«".join(specials) + "»"
    checked = 0
    for face in FACES:
        for cases in (requests, simple_requests, user_requests):
            path_, injected = cases(mark)[face]
            _, harmless = cases("«" + "»«".join(s[0] + ZW + s[1:] for s in specials) + "»")[face]
            with allowing(proxy):
                before = HTTP.post(proxy.url + path_, json=injected)
            if before.status_code != 200:
                continue  # the template refuses this conversation (the simple one is tried next)
            old = backend.bodies()[-1]["prompt"]
            first = HTTP.post(proxy.url + path_, json=harmless)
            if first.status_code != 200:
                continue
            reads = _controls(backend)
            answer = HTTP.post(proxy.url + path_, json=injected)
            assert answer.status_code == 200, (face, answer.text)
            body = backend.bodies()[-1]
            assert _controls(backend) == reads, (face, cases.__name__)
            text = backend.detokenize(backend.evaluated(body))
            if not _escaped(text, specials):
                assert text == old, (face, cases.__name__)
            checked += 1
            break
    assert checked, "no face could render a conversation with this template"


def _controls(backend: ScriptedBackend) -> list[str]:
    body = backend.bodies()[-1]
    return [backend.specials[t - SPECIAL_ID] for t in backend.evaluated(body) if t >= SPECIAL_ID]


def _escaped(text: str, specials: list[str]) -> bool:
    """Whether the trace fell back to escaping (a client's control string with U+200B after its first character)."""
    return any(s[0] + ZW + s[1:] in text for s in specials)
