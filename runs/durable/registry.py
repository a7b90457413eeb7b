"""The public API for writing agents and tools, and the registry that finds them."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import AgentNotFoundError, InputValidationError
from .retry import NO_RETRY, Retry
from .versions import UPGRADES


@dataclass(frozen=True)
class Done:
    """Returned by a step to finish the run with an output."""

    output: Any = None


class Tool:
    """A function whose calls are effects: logged, replayed, keyed."""

    def __init__(self, fn: Callable, *, idempotent: bool, retry: Retry, name: str | None,
                 meter: Callable | None = None,
                 stream: bool = False, limit: str | None = None):
        self.fn = fn
        self.idempotent = idempotent
        self.stream = stream
        self.retry = retry
        self.name = name or f"{fn.__module__}.{fn.__qualname__}"
        # meter(result, arguments) -> {"model", "prompt_tokens", "completion_tokens"}:
        # the call uses a budget (docs/budgets.md)
        self.meter = meter
        # the shared limit its calls count against (docs/limits.md): unconfigured, none
        self.limit = limit
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def arguments(self, args, kwargs) -> dict:
        """A call's arguments by name, as the tool's signature binds them (what gates and
        meters read)."""
        try:
            return dict(inspect.signature(self.fn).bind_partial(*args, **kwargs).arguments)
        except (TypeError, ValueError):  # a call its own tool would refuse: the values alone
            return {"args": list(args), **kwargs}

    def __repr__(self):
        return f"<tool {self.name} idempotent={self.idempotent}>"


def tool(fn: Callable | None = None, *, idempotent: bool = False, retry: Retry | None = None,
         name: str | None = None, meter: Callable | None = None,
         stream: bool = False, limit: str | None = None):
    """Mark a function as a tool. `@tool` or `@tool(idempotent=True, retry=Retry(...))`.

    An idempotent tool receives `idempotency_key=` and must dedup on it; it is
    retried (3 attempts) on errors by default. A non-idempotent tool is tried
    once unless a retry policy is given, and even then only after errors that
    say its request never left (`TransientToolError(reached_target=False)`);
    an in-doubt call is never retried without an operator.

    `meter(result, arguments)` makes the tool a metered one (a model call): it
    returns the call's usage, recorded on its effect and counted against budgets.
    A streaming tool (`stream=True`) is a generator: what it yields (text) is pushed
    to the run's viewers as it comes, in batches (docs/streaming.md); what it returns
    is its result, logged as any other (the yielded text joined, if it returns None).
    `limit="llm"` counts the tool's calls against the shared limit of that name (a rate,
    a concurrency, tokens a minute; docs/limits.md), when one is configured.
    """

    def wrap(f):
        if idempotent and "idempotency_key" not in inspect.signature(f).parameters:
            raise TypeError(f"idempotent tool {f.__qualname__} must accept idempotency_key=")
        if stream and not inspect.isgeneratorfunction(f):
            raise TypeError(f"streaming tool {f.__qualname__} must be a generator (yield chunks)")
        policy = retry if retry is not None else (Retry() if idempotent else NO_RETRY)
        return Tool(f, idempotent=idempotent, retry=policy, name=name, meter=meter,
                    stream=stream, limit=limit)

    return wrap(fn) if fn is not None else wrap


class Agent:
    """Base class of class-form agents.

    Class attributes an agent may set:
      input_schema     JSON Schema of the launch inputs (defaults and descriptions feed the form)
      checkpoint_every checkpoint after every N steps (1 = every step)
      checkpoint_seconds  or when this many seconds passed since the last checkpoint
      description      one line for the launch page
      expected_cadence seconds between two events of a healthy run (a step, a log line,
                       a progress report); silent longer than this while running, a
                       run shows as stalled (docs/stalls.md). None: the site default
      system           launched by agentops itself (a webhook delivery), not offered
                       to users: names() leaves it out
      default_budget   the run budget a launch gets unless it names one, {"cost": dollars,
                       "tokens": n} (docs/budgets.md). None: no budget
      approvals        calls that need a person's yes, as rules (docs/approvals.md):
                       {"tool", "when", "approvers", "timeout", "fallback"}
      conversation     a chat agent: the state key of its messages (OpenAI's format); the
                       run page shows them as a conversation and takes follow-ups, which
                       the agent receives from ctx.wait_for_input as {"message": text}
      upgrade          what a deploy of new code does with the runs of older code
                       (docs/deploys.md): "pin" (the default) leaves them to the workers
                       of their code while any is alive, then replays each history on
                       the new code and moves it if the replay is clean; "replay" does
                       that at once, for runs of an older declared version
    """

    name: str = ""
    version: str = "1"
    description: str = ""
    input_schema: dict = {"type": "object"}
    checkpoint_every: int = 1
    checkpoint_seconds: float | None = None
    expected_cadence: float | None = None
    system: bool = False
    default_budget: dict | None = None
    approvals: tuple = ()
    conversation: str | None = None
    upgrade: str = "pin"

    def start(self, inputs: dict) -> dict:
        return dict(inputs)

    def step(self, ctx, state: dict):  # pragma: no cover - every agent overrides it
        raise NotImplementedError(f"agent {self.name} defines no step()")

    def on_resume(self, ctx, state: dict) -> dict:
        return state

    def has_on_resume(self) -> bool:
        return type(self).on_resume is not Agent.on_resume


class FunctionAgent(Agent):
    """The function form: one step that returns the output."""

    fn: Callable

    def start(self, inputs: dict) -> dict:
        return {"inputs": dict(inputs)}

    def step(self, ctx, state: dict):
        return Done(type(self).fn(ctx, state["inputs"]))


@dataclass
class AgentRegistry:
    agents: dict[str, type[Agent]] = field(default_factory=dict)

    def register(self, cls: type[Agent]) -> None:
        if cls.upgrade not in UPGRADES:
            raise ValueError(f"agent {cls.name!r}: upgrade must be one of {', '.join(UPGRADES)}, "
                             f"not {cls.upgrade!r}")
        existing = self.agents.get(cls.name)
        if existing is not None and existing.__qualname__ != cls.__qualname__:
            raise ValueError(f"agent name {cls.name!r} is taken by {existing.__qualname__}")
        self.agents[cls.name] = cls

    def get(self, name: str) -> Agent:
        try:
            return self.agents[name]()
        except KeyError:
            raise AgentNotFoundError(name) from None

    def classes(self) -> list[type[Agent]]:
        """Every registered agent class, system agents included: what a worker runs."""
        return list(self.agents.values())

    def names(self) -> list[str]:
        """The agents users may launch (system agents left out)."""
        return sorted(name for name, cls in self.agents.items() if not cls.system)


registry = AgentRegistry()


def agent(name: str, *, version: str | None = None, input_schema: dict | None = None,
          description: str = "", expected_cadence: float | None = None,
          registry: AgentRegistry = registry):
    """Register an agent class (subclass of Agent) or a function `fn(ctx, inputs)`."""

    def wrap(target):
        if inspect.isclass(target):
            if not issubclass(target, Agent):
                raise TypeError(f"@agent class {target.__qualname__} must subclass Agent")
            cls = target
        else:
            # Its module is the function's: the code a run's fingerprint covers
            # (runs/durable/versions.py), not this one's.
            cls = type(target.__name__, (FunctionAgent,), {"fn": staticmethod(target),
                                                           "__doc__": target.__doc__,
                                                           "__module__": target.__module__})
            cls.__qualname__ = target.__qualname__
        cls.name = name
        if version is not None:
            cls.version = str(version)
        if input_schema is not None:
            cls.input_schema = input_schema
        if expected_cadence is not None:
            cls.expected_cadence = float(expected_cadence)
        if description:
            cls.description = description
        elif not cls.description and target.__doc__:
            cls.description = inspect.cleandoc(target.__doc__).splitlines()[0]
        registry.register(cls)
        return target

    return wrap


def validate_inputs(agent_cls: type[Agent] | Agent, inputs) -> dict:
    """Apply the schema's defaults and validate; raise InputValidationError."""
    import jsonschema

    if not isinstance(inputs, dict):
        raise InputValidationError(f"inputs must be a JSON object, not {type(inputs).__name__}")
    schema = agent_cls.input_schema or {"type": "object"}
    merged = {k: v["default"] for k, v in schema.get("properties", {}).items() if "default" in v}
    merged.update(inputs)
    try:
        _validator(json.dumps(schema, sort_keys=True)).validate(merged)
    except jsonschema.ValidationError as exc:
        field_name = ".".join(str(p) for p in exc.absolute_path)
        raise InputValidationError(exc.message, field=field_name) from None
    except jsonschema.SchemaError as exc:  # the agent's fault, said plainly
        raise InputValidationError(f"agent input schema is invalid: {exc.message}") from None
    return merged


@functools.lru_cache(maxsize=256)
def _validator(schema_json: str):
    """jsonschema.validate checks the schema itself on every call (1.6 ms a launch,
    measured); a schema is checked once and its validator kept."""
    import jsonschema

    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)
