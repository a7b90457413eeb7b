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


@dataclass(frozen=True)
class Done:
    """Returned by a step to finish the run with an output."""

    output: Any = None


class Tool:
    """A function whose calls are effects: logged, replayed, keyed."""

    def __init__(self, fn: Callable, *, idempotent: bool, retry: Retry, name: str | None):
        self.fn = fn
        self.idempotent = idempotent
        self.retry = retry
        self.name = name or f"{fn.__module__}.{fn.__qualname__}"
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def __repr__(self):
        return f"<tool {self.name} idempotent={self.idempotent}>"


def tool(fn: Callable | None = None, *, idempotent: bool = False, retry: Retry | None = None,
         name: str | None = None):
    """Mark a function as a tool. `@tool` or `@tool(idempotent=True, retry=Retry(...))`.

    An idempotent tool receives `idempotency_key=` and must dedup on it; it is
    retried (3 attempts) on errors by default. A non-idempotent tool is tried
    once unless a retry policy is given, and even then only after errors that
    say its request never left (`TransientToolError(reached_target=False)`);
    an in-doubt call is never retried without an operator.
    """

    def wrap(f):
        if idempotent and "idempotency_key" not in inspect.signature(f).parameters:
            raise TypeError(f"idempotent tool {f.__qualname__} must accept idempotency_key=")
        policy = retry if retry is not None else (Retry() if idempotent else NO_RETRY)
        return Tool(f, idempotent=idempotent, retry=policy, name=name)

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
    """

    name: str = ""
    version: str = "1"
    description: str = ""
    input_schema: dict = {"type": "object"}
    checkpoint_every: int = 1
    checkpoint_seconds: float | None = None
    expected_cadence: float | None = None

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
        existing = self.agents.get(cls.name)
        if existing is not None and existing.__qualname__ != cls.__qualname__:
            raise ValueError(f"agent name {cls.name!r} is taken by {existing.__qualname__}")
        self.agents[cls.name] = cls

    def get(self, name: str) -> Agent:
        try:
            return self.agents[name]()
        except KeyError:
            raise AgentNotFoundError(name) from None

    def names(self) -> list[str]:
        return sorted(self.agents)


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
            cls = type(target.__name__, (FunctionAgent,), {"fn": staticmethod(target),
                                                           "__doc__": target.__doc__})
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
