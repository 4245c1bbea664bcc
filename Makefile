# toolwire — the two commands a newcomer needs:
#   make run    the proxy on http://127.0.0.1:8000 in front of an embedded llama-server + SmolLM2
#               (make run BACKEND=http://host:port  for an existing backend; ARGS="..." adds flags)
#   make test   venv + install + every test (unit, API, conformance, end-to-end on a real model)
# and for contributors:
#   make check      ruff + mypy (strict on parsers/, detectors/ and app/); CI runs it first
#   make test-fast  every test but the end-to-end and scale tiers (no llama-server build, no balancer)
#   make test-lowest  the app's unit tests, the library contracts and one end-to-end exchange per face
#                   on the lowest versions pyproject.toml admits (a second venv; part of make test)

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PORT   ?= 8000

LOWEST := .venv-lowest
LOWEST_STAMP := $(LOWEST)/.installed
#: what runs on the lowest versions: the app's unit tests, the library contracts and what they stand
#: behind (head bounds, the FastAPI app, SSE, the fast render on every suite template), one exchange
#: per face on the real llama-server, metrics across workers (prometheus-client), prompts as tokens (tokenizers)
LOWEST_TESTS := tests/app tests/test_hook_contracts.py tests/test_head_bounds.py tests/test_fastapi_app.py \
	tests/test_sse.py tests/test_e2e_faces.py "tests/test_render_resume.py::test_the_fast_render_gives_what_jinja_gives" \
	tests/test_metrics.py tests/test_control_text.py

.PHONY: run test test-fast test-lowest check install artifacts bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

# the lowest versions of toolwire's dependencies that pyproject.toml admits (uv's lowest-direct
# resolution); the test tools at their newest that agree with those versions
$(LOWEST_STAMP): pyproject.toml $(STAMP)
	rm -rf $(LOWEST)
	$(VENV)/bin/uv venv --quiet --python $(PY) $(LOWEST)
	VIRTUAL_ENV=$(LOWEST) $(VENV)/bin/uv pip install --quiet --resolution lowest-direct -e .
	VIRTUAL_ENV=$(LOWEST) $(VENV)/bin/uv pip freeze --exclude-editable > $(LOWEST)/lowest.txt
	VIRTUAL_ENV=$(LOWEST) $(VENV)/bin/uv pip install --quiet -c $(LOWEST)/lowest.txt pytest pytest-asyncio \
		hypothesis openai anthropic pyyaml
	@touch $@

# llama-server (built once per machine from PyPI's llama-cpp-python sdist), the SmolLM2 GGUF, and
# the agents the tests drive, from npm (Claude Code, Codex CLI, opencode; skipped without npm)
artifacts: $(STAMP)
	$(PY) -m app.local.artifacts all

test: $(STAMP) artifacts
	$(PY) -m pytest
	$(MAKE) test-lowest

test-lowest: $(LOWEST_STAMP) artifacts
	@echo "lowest versions: $$(grep -E -i '^(fastapi|starlette|uvicorn|pydantic|pydantic-settings|jinja2|httpx|orjson)==' $(LOWEST)/lowest.txt | tr '\n' ' ')"
	$(LOWEST)/bin/toolwire serve --help > /dev/null
	$(LOWEST)/bin/python -m pytest $(LOWEST_TESTS)

test-fast: $(STAMP)
	$(PY) -m pytest -m "not e2e and not scale"

check: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m mypy

run: $(STAMP)
ifdef BACKEND
	$(VENV)/bin/toolwire serve --backend $(BACKEND) --port $(PORT) $(ARGS)
else
	$(PY) -m app.local.artifacts all
	$(VENV)/bin/toolwire serve --local-model embedded --port $(PORT) --tool-call-parser hermes $(ARGS)
endif

# benchmarks (parsers, SGLang side by side in its own venv under bench/out, proxy overhead): report in
# bench/out/report.md and bench/out/summary.json. Needs no model: the backend is scripted.
bench: $(STAMP)
	$(PY) -m bench.run

clean:
	rm -rf $(VENV) $(LOWEST) bench/out
