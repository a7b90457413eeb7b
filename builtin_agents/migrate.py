"""The migrate agent: copies a source dataset in batches through the idempotent records
API, verifies counts and checksums, then cuts over with a notification (approved first
with approve_cutover). The pattern of every built-in agent is in builtin_agents/agents.py."""

from __future__ import annotations

import json

from runs.durable import Agent, ApprovalDeniedError, Done, agent

from .tools import dataset
from .tools.http import sandbox_url

SANDBOX = sandbox_url()


class MigrationError(Exception):
    """The target does not hold what the migration wrote."""


@agent("migrate", version="2")
class Migrate(Agent):
    """Copy a dataset in batches through an idempotent API, verify it, then cut over."""

    # The cut-over notification is not idempotent: with approve_cutover an operator
    # says yes to the exact message first (docs/approvals.md). Runs launched before the
    # input existed have no such input and are not asked.
    approvals = ({"tool": dataset.notify.name, "approvers": "operators", "fallback": "deny",
                  "when": "'approve_cutover' in inputs and inputs.approve_cutover"},)

    input_schema = {
        "type": "object",
        "properties": {
            "source_url": {"type": "string", "default": f"{SANDBOX}/dataset/rows",
                           "description": "The source's rows endpoint."},
            "target_url": {"type": "string", "default": f"{SANDBOX}/api",
                           "description": "The target API: <target_url>/records (idempotent) "
                                          "and <target_url>/notifications."},
            "rows": {"type": "integer", "minimum": 1, "maximum": 200_000, "default": 100_000,
                     "description": "Rows in the source dataset (the verification reads "
                                    "them all back at once, hence the limit)."},
            "batch_size": {"type": "integer", "minimum": 20, "maximum": 5000, "default": 1000,
                           "description": "Rows read, transformed and written per step."},
            "seed": {"type": "integer", "minimum": 0, "default": 0,
                     "description": "Seed of the generated source dataset."},
            "approve_cutover": {"type": "boolean", "default": False,
                                "description": "An operator approves the cut-over "
                                               "notification before it is sent."},
        },
    }

    def start(self, inputs):
        return {**inputs, "phase": "copy", "offset": 0, "batches": 0, "copied": 0,
                "source_checksum": dataset.ZERO, "expected_checksum": dataset.ZERO,
                "verified": None}

    def step(self, ctx, state):
        if state["phase"] == "copy":
            return self.copy_batch(ctx, state)
        if state["phase"] == "verify":
            return self.verify(ctx, state)
        return self.cut_over(ctx, state)

    def copy_batch(self, ctx, state):
        """Read a batch, transform it, write it as one record under this step's key."""
        page = ctx.call(dataset.read_rows, state["source_url"], state["offset"],
                        state["batch_size"], state["rows"], state["seed"])
        rows = [self.transform(row) for row in page["rows"]]
        checksum = dataset.checksum(rows)
        unit = f"{ctx.run_id}-batch-{state['offset']}"
        written = ctx.call(dataset.write_batch, state["target_url"], unit, rows)
        if written["checksum"] != checksum:
            raise MigrationError(f"the target stored something else for {unit}")
        state["source_checksum"] = dataset.add_checksums(state["source_checksum"],
                                                         page["checksum"])
        state["expected_checksum"] = dataset.add_checksums(state["expected_checksum"], checksum)
        state["copied"] += len(rows)
        state["batches"] += 1
        state["offset"] = page["next_offset"]
        if state["offset"] is None:
            state["phase"] = "verify"
        ctx.progress(state["copied"], state["rows"], f"batch {state['batches']}: {unit}")
        return state

    def transform(self, row: dict) -> dict:
        """The migration's business rule, one row at a time (pure: replays must agree)."""
        return dataset.transform(row)

    def verify(self, ctx, state):
        """Read the target back; every count and checksum must match the source."""
        # The engine's idempotency keys start with the run id: they name this run's records.
        found = ctx.call(dataset.read_back, state["target_url"], f"{ctx.run_id}:")
        expected = {"records": state["batches"], "rows": state["rows"],
                    "checksum": state["expected_checksum"], "duplicate_units": []}
        wrong = {k: (found[k], v) for k, v in expected.items() if found[k] != v}
        if state["copied"] != state["rows"]:
            wrong["copied"] = (state["copied"], state["rows"])
        if wrong:
            raise MigrationError("verification failed (found, expected): " + json.dumps(wrong))
        ctx.log(f"verified {found['rows']} rows in {found['records']} records, "
                f"checksum {found['checksum']}")
        state["verified"] = found
        state["phase"] = "cut_over"
        return state

    def cut_over(self, ctx, state):
        """Announce the switch. Not idempotent: after a crash here an operator decides.
        Denied (approve_cutover), the data stays copied and verified, not announced."""
        try:
            sent = ctx.call(dataset.notify, state["target_url"], {
                "unit": f"{ctx.run_id}-cutover", "event": "migration.cutover",
                "rows": state["rows"], "checksum": state["expected_checksum"]})
        except ApprovalDeniedError as denied:
            ctx.log(f"cut-over not announced: {denied.message}")
            return Done({"rows": state["copied"], "batches": state["batches"],
                         "source_checksum": state["source_checksum"],
                         "checksum": state["expected_checksum"], "verified": state["verified"],
                         "cut_over": False, "denied": denied.message})
        ctx.log(f"cut-over announced: {sent}")
        return Done({"rows": state["copied"], "batches": state["batches"],
                     "source_checksum": state["source_checksum"],
                     "checksum": state["expected_checksum"], "verified": state["verified"],
                     "cut_over": True})
