# toolwire — the two commands a newcomer needs:
#   make run    the proxy on http://127.0.0.1:8000 in front of an embedded llama-server + SmolLM2
#               (make run BACKEND=http://host:port  for an existing backend; ARGS="..." adds flags)
#   make test   venv + install + every test (unit, API, conformance, end-to-end on a real model)
# and for contributors:
#   make check      ruff + mypy (strict on parsers/, detectors/ and app/); CI runs it first
#   make test-fast  every test but the end-to-end and scale tiers (no llama-server build, no balancer)

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PORT   ?= 8000

.PHONY: run test test-fast check install artifacts bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

# llama-server (built once per machine from PyPI's llama-cpp-python sdist), the SmolLM2 GGUF, and
# the agents the tests drive, from npm (Claude Code, Codex CLI, opencode; skipped without npm)
artifacts: $(STAMP)
	$(PY) -m app.local.artifacts all

test: $(STAMP) artifacts
	$(PY) -m pytest

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
	rm -rf $(VENV) bench/out
