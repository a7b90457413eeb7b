"""Shared limits per tool or provider, on the Django side (docs/limits.md)."""
