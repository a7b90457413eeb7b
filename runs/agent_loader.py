"""Finds agents: the `agents` module of every installed app, plus the modules
named in AGENTOPS_AGENT_MODULES (comma-separated)."""

from importlib import import_module

from django.conf import settings
from django.utils.module_loading import autodiscover_modules


def load_agents() -> None:
    autodiscover_modules("agents")
    for module in settings.AGENTOPS["AGENT_MODULES"]:
        import_module(module)
