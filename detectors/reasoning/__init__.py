"""Reasoning formats."""
