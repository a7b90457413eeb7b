"""The agent SDKs' tests need Pydantic AI and the OpenAI Agents SDK (the `adapters` extra).

Checked without importing them: `pytest.importorskip` imports the package, and every test
process collects every test module, so each paid the SDKs' import at collection (2.9 CPU-s
of its 12) whether or not it ran one of their tests."""

import importlib.util

import pytest

SDKS = ("pydantic_ai", "agents")


def skip_module_without_sdks() -> None:
    missing = [name for name in SDKS if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (pip install '.[adapters]')",
                    allow_module_level=True)
