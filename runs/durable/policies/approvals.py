"""Approvals bound to the exact call: a gate (runs/durable/policies/gates.py) and its book.

A rule says which calls need a person's yes: a tool, optionally an agent, and a
predicate over the call's arguments and the run's inputs (`amount > 1000`,
`inputs.approve_notes`). For a call a rule covers, the gate looks up the request
bound to that call: the run, the call's idempotency key (run, branch, step, seq: its
position) and its argument digest. So an approval covers that one call and nothing
else: another position, another branch after a rollback, or other arguments at the
same position (a replay after a state edit) is another request. It is used once:
only the call with its key and digest can pass on it, and once that call's outcome
is logged it is replayed from the log, never asked about again. A crash between the
approval and the call finds the same approved request on resume: it neither asks
again nor calls twice (the call was not made, or its intent is in the log).

An answer is in time or not at all: the book refuses one given at or after the
request's deadline (ApprovalExpiredError), and the gate treats a request answered at
or after its deadline as expired whatever its status says, so a late "yes" can never
turn the fallback into a call (a book whose clock or code let one through, a row
written by hand).

Where the requests live is the book's business (`ApprovalBook`): in memory here,
in the database on the Django side (runs/budgets/book.py). Who may answer is the
rule's `approvers`; the book's owner checks it (runs/budgets/selectors.py).
"""

from __future__ import annotations

import ast
import json
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from typing import Protocol

from .. import clock
from ..errors import DurableError, InputValidationError
from .gates import ALLOW, FALLBACKS, Allow, Decision, GateCall, Hold, Refuse

PENDING, APPROVED, DENIED, EXPIRED = "pending", "approved", "denied", "expired"
APPROVER_KINDS = ("owner", "operators", "group")
MAX_PREDICATE = 500


@dataclass(frozen=True)
class ApprovalRule:
    tool: str
    when: str = ""                # a predicate; empty: every call of the tool
    approvers: str = "owner"      # "owner", "operators" or "group:<name>"
    timeout: float | None = None  # seconds until the fallback; None: wait for an answer
    fallback: str = "deny"        # "deny" or "skip"
    agent: str = ""               # "" for any agent
    name: str = ""

    def __post_init__(self):
        check_rule(self)

    def covers(self, call: GateCall) -> bool:
        if self.tool != call.tool.name or (self.agent and self.agent != call.run.agent):
            return False
        return not self.when or holds(self.when, call.arguments, call.run.inputs)

    @classmethod
    def of(cls, data: dict) -> ApprovalRule:
        known = {k: data[k] for k in ("tool", "when", "approvers", "timeout", "fallback",
                                      "agent", "name") if k in data}
        return cls(**known)


def check_rule(rule: ApprovalRule) -> None:
    """Refuse a rule that could never be applied as written (InputValidationError)."""
    if not rule.tool:
        raise InputValidationError("an approval rule needs a tool", field="tool")
    kind, _, group = rule.approvers.partition(":")
    if kind not in APPROVER_KINDS or (kind == "group") != bool(group):
        raise InputValidationError("approvers must be owner, operators or group:<name>",
                                   field="approvers")
    if rule.fallback not in FALLBACKS:
        raise InputValidationError("the fallback must be deny or skip", field="fallback")
    if rule.timeout is not None and not (0 < float(rule.timeout) <= 366 * 86400):
        raise InputValidationError("the timeout must be between a second and a year",
                                   field="timeout")
    if rule.when:
        parse_predicate(rule.when)


# --- predicates ----------------------------------------------------------------------------
_COMPARE = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b,
            ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b,
            ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
            ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
_NODES = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub,
          ast.Compare, ast.Name, ast.Load, ast.Constant, ast.Attribute, ast.Subscript,
          ast.List, ast.Tuple, *_COMPARE)


def parse_predicate(text: str) -> ast.Expression:
    """A predicate is a comparison language, nothing more: names (the call's arguments,
    `inputs`), constants, `.field` and `[key]`, comparisons, and/or/not."""
    if len(text) > MAX_PREDICATE:
        raise InputValidationError(f"the condition is over {MAX_PREDICATE} characters",
                                   field="when")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise InputValidationError(f"the condition is not valid: {exc.msg}", field="when") from None
    for node in ast.walk(tree):
        if not isinstance(node, _NODES):
            raise InputValidationError(f"the condition may not use {type(node).__name__}: only "
                                       "names, constants, comparisons, and/or/not",
                                       field="when")
    return tree


def holds(text: str, arguments: dict, inputs: dict) -> bool:
    """Whether the predicate holds for a call. One that cannot be evaluated on it (a
    missing argument, a type mismatch) holds: approvals fail closed."""
    try:
        names = {**arguments, "inputs": inputs}
        return bool(_eval(parse_predicate(text).body, names))
    except (InputValidationError, TypeError, KeyError, IndexError, ValueError, LookupError):
        return True


def _eval(node, names):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return names[node.id]
    if isinstance(node, ast.Attribute):
        return _eval(node.value, names)[node.attr]
    if isinstance(node, ast.Subscript):
        return _eval(node.value, names)[_eval(node.slice, names)]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_eval(e, names) for e in node.elts]
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, names)
        return (not value) if isinstance(node.op, ast.Not) else -value
    if isinstance(node, ast.BoolOp):
        values = (_eval(v, names) for v in node.values)
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, names)
        for op, comparator in zip(node.ops, node.comparators):
            right = _eval(comparator, names)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    raise ValueError(type(node).__name__)


# --- requests and the book -----------------------------------------------------------------
class ApprovalExpiredError(DurableError):
    """An answer to a request whose deadline has passed: refused, nothing recorded; the
    request's fallback applies when the run goes on."""

    def __init__(self, tool: str, deadline: float, fallback: str):
        self.tool, self.deadline, self.fallback = tool, deadline, fallback
        at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(deadline))
        super().__init__(f"too late: the request for {tool} expired at its deadline ({at}); "
                         f"the answer was not recorded and the fallback ({fallback}) applies")


@dataclass
class ApprovalRequest:
    id: str
    run_id: str
    key: str
    digest: str
    tool: str
    args_preview: str
    rule: dict
    status: str = PENDING
    requested_at: float = 0.0
    deadline: float | None = None
    decided_by: str = ""
    used_by: str = ""
    arguments: dict = field(default_factory=dict)
    decided_at: float | None = None

    def answered_late(self) -> bool:
        """Approved or denied at or after the deadline: such an answer never counts."""
        return (self.status in (APPROVED, DENIED) and self.deadline is not None
                and (self.decided_at is None or self.decided_at >= self.deadline))

    def expired(self) -> ApprovalRequest:
        return replace(self, status=EXPIRED)


class ApprovalBook(Protocol):
    def find(self, run_id: str, key: str, digest: str) -> ApprovalRequest | None:
        """The request bound to this call, if any."""

    def request(self, call: GateCall, rule: ApprovalRule,
                deadline: float | None) -> ApprovalRequest:
        """Create the pending request of this call, or return the one that exists."""

    def expire(self, request: ApprovalRequest) -> ApprovalRequest:
        """Pending past its deadline: expired, unless someone answered meanwhile (the
        request as it now is)."""

    def use(self, request: ApprovalRequest, key: str) -> None:
        """The approved call is about to be made under `key`."""


def hold_of(request: ApprovalRequest) -> Hold:
    return Hold("approval", f"waiting for approval of {request.tool}({request.args_preview})"[:500],
                {"approval": request.id, "tool": request.tool,
                 "args_preview": request.args_preview, "arguments": request.arguments,
                 "approvers": request.rule.get("approvers", "owner"),
                 "deadline": request.deadline, "key": request.key},
                wait=True, wake_at=request.deadline)


class ApprovalGate:
    """`rules(run, tool)`: the rules that may cover a call of `tool` in `run`, first
    match wins (so list the narrow ones first)."""

    def __init__(self, book: ApprovalBook, rules):
        self.book = book
        self.rules = rules

    def check(self, call: GateCall) -> Decision:
        rule = next((rule for rule in self.rules(call.run, call.tool) if rule.covers(call)), None)
        if rule is None:
            return ALLOW
        request = self.book.find(call.run.id, call.key, call.digest)
        now = clock.now()
        if request is None:
            deadline = now + float(rule.timeout) if rule.timeout else None
            request = self.book.request(call, rule, deadline)
        if request.status == PENDING and request.deadline is not None and now >= request.deadline:
            request = self.book.expire(request)
        if request.answered_late():  # the answer came after the fallback was due
            request = request.expired()
        if request.status == APPROVED:
            self.book.use(request, call.key)
            return Allow({"approval": request.id, "approved_by": request.decided_by})
        if request.status == DENIED:
            return Refuse("approval", f"{request.tool} was denied by {request.decided_by or 'a person'}",
                          details={"approval": request.id})
        if request.status == EXPIRED:
            fallback = request.rule.get("fallback", "deny")
            return Refuse("approval", f"{request.tool} was not approved in time "
                                      f"(fallback: {fallback})",
                          fallback=fallback, details={"approval": request.id})
        return hold_of(request)


class MemoryApprovalBook:
    """The book in memory, for MemoryStore and tests; `decide` is a person's answer."""

    def __init__(self):
        self.requests: dict[tuple[str, str, str], ApprovalRequest] = {}
        self._lock = threading.Lock()

    def find(self, run_id, key, digest):
        with self._lock:
            found = self.requests.get((run_id, key, digest))
            return replace(found) if found else None

    def request(self, call, rule, deadline):
        with self._lock:
            slot = (call.run.id, call.key, call.digest)
            if slot not in self.requests:
                self.requests[slot] = ApprovalRequest(
                    id=uuid.uuid4().hex, run_id=call.run.id, key=call.key, digest=call.digest,
                    tool=call.tool.name, args_preview=call.record.args_preview,
                    rule=asdict(rule), requested_at=clock.now(), deadline=deadline,
                    arguments=_plain(call.arguments))
            return replace(self.requests[slot])

    def expire(self, request):
        with self._lock:
            stored = self._by_id(request.id)
            if stored.status == PENDING:
                stored.status = EXPIRED
            return replace(stored)

    def use(self, request, key):
        with self._lock:
            self._by_id(request.id).used_by = key

    def decide(self, request_id: str, *, approve: bool, by: str) -> ApprovalRequest:
        with self._lock:
            stored = self._by_id(request_id)
            if stored.status != PENDING:
                raise ValueError(f"the request is {stored.status}")
            now = clock.now()
            if stored.deadline is not None and now >= stored.deadline:
                raise ApprovalExpiredError(stored.tool, stored.deadline,
                                           stored.rule.get("fallback", "deny"))
            stored.status, stored.decided_by = (APPROVED if approve else DENIED), by
            stored.decided_at = now
            return replace(stored)

    def requests_of(self, run_id: str) -> list[ApprovalRequest]:
        with self._lock:
            return [replace(q) for q in self.requests.values() if q.run_id == run_id]

    def _by_id(self, request_id: str) -> ApprovalRequest:
        return next(q for q in self.requests.values() if q.id == request_id)


def _plain(arguments: dict) -> dict:
    """The arguments as JSON can hold them (what the inbox shows)."""
    return json.loads(json.dumps(arguments, default=repr))
