"""What the private hooks that stay are worth, each against the library's own path, side by side in
one run (README "Dependencies"): ``fastrender.render`` against jinja's ``Template.render`` (a
one-message conversation, Qwen2.5's template), and the sandbox's namespace fast path against
jinja's sandboxed ``getattr``. Best of repeats, warm, µs.

Run: ``python -m bench.hooks``.
"""

from __future__ import annotations

import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jinja2.sandbox import SandboxedEnvironment
from jinja2.utils import Namespace

from app.templates.chat_template import ChatTemplate, _environment, prepare_messages
from app.templates.fastrender import render

TEMPLATE = Path(__file__).resolve().parent.parent / "tests" / "data" / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja"


def best_us(call: Callable[[], Any], number: int, repeat: int = 7) -> float:
    return min(timeit.repeat(call, number=number, repeat=repeat)) / number * 1e6


def main() -> None:
    template = ChatTemplate(TEMPLATE.read_text())._template
    context = {"bos_token": "", "eos_token": "", "tools": None, "add_generation_prompt": True,
               "messages": prepare_messages([{"role": "user", "content": "What is the weather like?"}])}
    assert render(template, context) == template.render(**context)
    env = _environment()
    ns = Namespace(flag=True)
    general = SandboxedEnvironment.getattr
    for _ in range(2):
        print(f"render, one message: jinja's render {best_us(lambda: template.render(**context), 2000):6.2f} µs   "
              f"fastrender {best_us(lambda: render(template, context), 2000):6.2f} µs")
        print(f"ns.flag in the sandbox: general path {best_us(lambda: general(env, ns, 'flag'), 100_000):6.3f} µs   "
              f"fast path {best_us(lambda: env.getattr(ns, 'flag'), 100_000):6.3f} µs")


if __name__ == "__main__":
    main()
