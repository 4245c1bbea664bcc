"""Regenerate ``hf_image_renders.json``: transformers' own renders of the conversations with images
(``render_cases.image_cases``) for every template in ``templates/`` that mentions images. Run as
``make_hf_renders.py`` is (a scratch venv with ``pip install transformers jinja2``; transformers is
not a toolwire dependency)."""

import datetime as _dt
import json
import sys
from pathlib import Path

from transformers.utils import chat_template_utils

sys.path.insert(0, str(Path(__file__).parent))
from render_cases import PINNED_NOW, image_cases


class _PinnedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return PINNED_NOW


chat_template_utils.datetime = _PinnedDatetime

here = Path(__file__).parent
out = {}
for path in sorted((here / "templates").glob("*.jinja")):
    source = path.read_text(encoding="utf-8")
    if "image" not in source:
        continue
    renders = {}
    for label, kwargs in image_cases().items():
        messages = kwargs.pop("messages")
        try:
            text, _ = chat_template_utils.render_jinja_template(
                conversations=[messages], chat_template=source, add_generation_prompt=True,
                bos_token="<BOS>", eos_token="<EOS>", **kwargs)
            renders[label] = text[0]
        except Exception as exc:  # noqa: BLE001
            renders[label] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    out[path.name] = renders
(here / "hf_image_renders.json").write_text(json.dumps(out, ensure_ascii=False, indent=1, sort_keys=True),
                                            encoding="utf-8")
print(f"{len(out)} templates rendered")
