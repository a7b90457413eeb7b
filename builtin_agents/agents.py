"""The built-in agents: a crawler, a migration and a tool-using assistant.

They use only agentops' public API (``runs.durable``), as your own agents would,
so they are the place to start when writing one. The pattern in each:

- ``start(inputs)`` builds the first state from the launch inputs;
- ``step(ctx, state)`` does a bounded piece of work. Everything that touches the
  outside world goes through ``ctx.call(tool, ...)``: logged, replayed after a
  crash (so the step may be run again safely), and given an idempotency key;
- anything the step decides must follow from the state and the tools' results
  alone, so that a replay takes the same decisions (change ``version`` whenever
  the code of a step changes; the engine refuses to replay a run on another one);
- the step returns the next state (a checkpoint) or ``Done(output)``.

Each agent reaches the sandbox (the stand-in for the outside world) through a URL
input whose default comes from ``AGENTOPS["SANDBOX_URL"]``.

One module per agent: ``crawl.py``, ``migrate.py``, ``assistant.py``. This module, which
the runs app's autodiscovery imports (an app's ``agents`` module), imports them and the
SDK agents made durable (``sdk_agents.py``: a Pydantic AI agent and an OpenAI Agents SDK
agent, each wrapped by runs.adapters.durable; registered only where their SDK is
installed), so that all of them are registered.
"""

from . import sdk_agents
from .assistant import Assistant
from .crawl import Crawl
from .migrate import Migrate, MigrationError

__all__ = ["Assistant", "Crawl", "Migrate", "MigrationError", "sdk_agents"]
