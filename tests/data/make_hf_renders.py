"""Regenerate ``hf_renders.json``: reference renders of every template in ``templates/`` by
Hugging Face transformers' own ``render_jinja_template`` (run in a scratch venv with
``pip install transformers jinja2``; transformers is not a toolwire dependency).

The clock is pinned to PINNED_NOW so templates that print today's date render reproducibly.
``make_hf_image_renders.py`` renders the conversations with images the same way.
"""

import datetime as _dt
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers.utils import chat_template_utils

sys.path.insert(0, str(Path(__file__).parent))
from render_cases import PINNED_NOW, render_cases


class _PinnedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return PINNED_NOW


chat_template_utils.datetime = _PinnedDatetime
here = Path(__file__).parent


def render_templates(cases: dict[str, dict[str, Any]], out: str, keep: Callable[[str], bool] = lambda _: True) -> None:
    """Render ``cases`` with every template whose source ``keep`` accepts into ``out`` (a JSON file here)."""
    rendered = {}
    for path in sorted((here / "templates").glob("*.jinja")):
        source = path.read_text(encoding="utf-8")
        if not keep(source):
            continue
        renders = {}
        for label, kwargs in cases.items():
            kwargs = dict(kwargs)
            messages = kwargs.pop("messages")
            try:
                text, _ = chat_template_utils.render_jinja_template(
                    conversations=[messages], chat_template=source, add_generation_prompt=True,
                    bos_token="<BOS>", eos_token="<EOS>", **kwargs)
                renders[label] = text[0]
            except Exception as exc:  # noqa: BLE001
                renders[label] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        rendered[path.name] = renders
    (here / out).write_text(json.dumps(rendered, ensure_ascii=False, indent=1, sort_keys=True), encoding="utf-8")
    print(f"{len(rendered)} templates rendered into {out}")


if __name__ == "__main__":
    render_templates(render_cases(dict_arguments=True), "hf_renders.json")
