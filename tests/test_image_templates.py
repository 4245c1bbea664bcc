"""Conversations with images render exactly as transformers renders them, through toolwire's own
path (turns with media items → template messages → render), on the suite's templates that mention
images. ``tests/data/hf_image_renders.json`` holds transformers' renders (``make_hf_image_renders.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.conversation import Call, Turn
from app.media import Media, Part
from app.templates import chat_template
from app.templates.chat_template import ChatTemplate, TemplateError
from app.templates.prompt import _image_roles, render_conversation
from tests.data.render_cases import PINNED_NOW, image_cases
from tests.test_images import png

DATA = Path(__file__).parent / "data"
REFERENCE: dict[str, dict[str, Any]] = json.loads((DATA / "hf_image_renders.json").read_text(encoding="utf-8"))
#: templates whose image parts this suite must render exactly (vision models the issue names)
VISION = ["Qwen3.5-4B.jinja", "google-gemma-4-31B-it.jinja", "Mistral-Small-3.2-24B-Instruct-2506.jinja",
          "Reka-Edge.jinja", "mistralai-Ministral-3-14B-Reasoning-2512.jinja"]
IMAGE = Media.of(png(), "test")


@pytest.fixture(autouse=True)
def pinned_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chat_template, "_now", lambda: PINNED_NOW)


def turns_of(messages: list[dict[str, Any]]) -> list[Turn]:
    """Client messages (as transformers takes them) as the turns a face decodes them into."""
    turns = []
    for message in messages:
        content = message["content"]
        parts: tuple[Part, ...] = ()
        if isinstance(content, list):
            parts = tuple(p["text"] if p["type"] == "text" else IMAGE for p in content)
            content = "".join(p for p in parts if isinstance(p, str))
        calls = tuple(Call(c["id"], c["function"]["name"], json.dumps(c["function"]["arguments"]))
                      for c in message.get("tool_calls") or ())
        turns.append(Turn(message["role"], content, calls, tool_call_id=message.get("tool_call_id"),
                          name=message.get("name"), parts=parts))
    return turns


def _cases() -> list[tuple[str, str]]:
    return [(name, label) for name in sorted(REFERENCE) for label in REFERENCE[name]]


def test_the_vision_templates_are_in_the_reference_and_take_images() -> None:
    for name in VISION:
        assert all(isinstance(REFERENCE[name][label], str) for label in image_cases()), name
        assert "user" in _image_roles(ChatTemplate((DATA / "templates" / name).read_text(encoding="utf-8"))), name


@pytest.mark.parametrize(("name", "label"), _cases(), ids=[f"{n}:{case}" for n, case in _cases()])
def test_image_render_matches_transformers(name: str, label: str) -> None:
    template = ChatTemplate((DATA / "templates" / name).read_text(encoding="utf-8"), "<BOS>", "<EOS>")
    case = image_cases()[label]
    expected = REFERENCE[name][label]
    roles = _image_roles(template)
    if label == "image_in_tool_result" and "tool" not in roles:
        # no place for images in its tool results: they follow the results in a user turn instead, or
        # — where the template refuses that too (Mistral's roles must alternate) — a 400 that says so
        try:
            prompt = render_conversation(template, turns_of(case["messages"]), case.get("tools"))
        except TemplateError as exc:
            assert "no place for images in tool results" in str(exc)
            return
        assert "Radar:" in prompt
        return
    if isinstance(expected, dict):  # transformers fails on it (Kimi K2's list building): ours renders
        assert "Radar:" in render_conversation(template, turns_of(case["messages"]), case.get("tools"))
        return
    assert render_conversation(template, turns_of(case["messages"]), case.get("tools")) == expected


def test_a_template_without_image_parts_refuses_images_clearly() -> None:
    template = ChatTemplate((DATA / "templates" / "MiMo-VL.jinja").read_text(encoding="utf-8"))
    with pytest.raises(TemplateError, match="no place for images"):
        render_conversation(template, turns_of(image_cases()["image_after_text"]["messages"]), None)
    # with a backend's media marker the template sees text, as llama-server's chat endpoint gives it
    prompt = render_conversation(template, turns_of(image_cases()["image_after_text"]["messages"]), None,
                                 media="<__media__>")
    assert "What is in this picture?<__media__>" in prompt
