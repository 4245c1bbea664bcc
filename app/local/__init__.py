"""The embedded default: llama-server built once from PyPI's llama.cpp source and the SmolLM2 model
from PyPI (``artifacts``), and a managed llama-server subprocess (``llama_server``)."""
