"""Constrained decoding: tool_choice / parallel_tool_calls / response_format turned into what a
backend enforces (GBNF grammars for llama.cpp, JSON schemas and structural tags for vLLM)."""
