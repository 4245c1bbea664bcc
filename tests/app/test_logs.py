"""``app.logs.configure``: toolwire's JSON lines on stderr; uvicorn's errors through them, its access
lines (the edge writes its own) nowhere — with no handler in sight, which is what makes uvicorn's
protocol skip formatting them (``HttpToolsProtocol.access_log``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from app.logs import configure

NAMES = ("", "uvicorn", "uvicorn.error", "uvicorn.access", "httpx")


@pytest.fixture
def logging_restored() -> Iterator[None]:
    saved = {name: (logging.getLogger(name).handlers[:], logging.getLogger(name).propagate,
                    logging.getLogger(name).level) for name in NAMES}
    yield
    for name, (handlers, propagate, level) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers[:], logger.propagate = handlers, propagate
        logger.setLevel(level)


def test_uvicorn_access_lines_have_no_handler_and_its_errors_do(logging_restored: None) -> None:
    logging.getLogger("uvicorn.access").addHandler(logging.NullHandler())  # as uvicorn's own config leaves it
    configure("info")
    assert not logging.getLogger("uvicorn.access").hasHandlers()
    assert logging.getLogger("uvicorn.error").hasHandlers()
    assert logging.getLogger("toolwire.access").hasHandlers()


def test_uvicorns_protocol_then_formats_no_access_line(logging_restored: None) -> None:
    configure("info")
    config = Config(app=lambda scope, receive, send: None, log_config=None)
    config.load()
    loop = asyncio.new_event_loop()
    try:
        protocol = HttpToolsProtocol(config, ServerState(), {}, _loop=loop)
    finally:
        loop.close()
    assert protocol.access_log is False
