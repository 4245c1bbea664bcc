"""Tool-call formats."""
