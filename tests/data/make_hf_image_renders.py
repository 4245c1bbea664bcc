"""Regenerate ``hf_image_renders.json``: transformers' own renders of the conversations with images
(``render_cases.image_cases``) for every template in ``templates/`` that mentions images. Run as
``make_hf_renders.py`` is (a scratch venv with ``pip install transformers jinja2``; transformers is
not a toolwire dependency)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from make_hf_renders import render_templates
from render_cases import image_cases

render_templates(image_cases(), "hf_image_renders.json", keep=lambda source: "image" in source)
