"""Agents whose payment waits for its owner's approval until a deadline, then falls back
(deny or skip): docs/approvals.md. The payment appends a line to the file its run names,
so a test sees from any process, a worker's too, whether it was made. The deadline is far
off: a test makes it pass when it wants (tests/budgets/test_approval_deadlines.py), so that
what it does in time is in time on any machine."""

from runs.durable import Agent, ApprovalDeniedError, Done, agent, tool

DEADLINE_SECONDS = 3600


@tool(name="tests.deadline.pay")
def pay(amount: int, ledger: str) -> dict:
    with open(ledger, "a") as f:
        f.write(f"paid {amount}\n")
    return {"paid": amount}


class DeadlinePayer(Agent):
    input_schema = {"type": "object", "required": ["amount", "ledger"], "properties": {
        "amount": {"type": "integer"}, "ledger": {"type": "string"}}}

    def start(self, inputs):
        return dict(inputs)

    def step(self, ctx, state):
        try:
            return Done({"paid": ctx.call(pay, state["amount"], state["ledger"])})
        except ApprovalDeniedError as denied:
            return Done({"denied": denied.message})


@agent("deadline_payer")
class DenyingPayer(DeadlinePayer):
    approvals = ({"tool": "tests.deadline.pay", "approvers": "owner",
                  "timeout": DEADLINE_SECONDS, "fallback": "deny"},)


@agent("deadline_skipper")
class SkippingPayer(DeadlinePayer):
    approvals = ({"tool": "tests.deadline.pay", "approvers": "owner",
                  "timeout": DEADLINE_SECONDS, "fallback": "skip"},)
