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
"""

from __future__ import annotations

import json

from runs.durable import Agent, ApprovalDeniedError, Call, Done, ToolFailedError, agent

from .tools import crawl as site
from .tools import dataset, research
from .tools.http import sandbox_url
from .tools.llm import chat_completion, default_base_url, default_model

SANDBOX = sandbox_url()


# --- crawl ---------------------------------------------------------------------------------------
@agent("crawl", version="3")
class Crawl(Agent):
    """Crawl the sandbox's generated site breadth-first; report terms, links and failures."""

    input_schema = {
        "type": "object",
        "properties": {
            "site_url": {"type": "string", "default": f"{SANDBOX}/site",
                         "description": "The site's base URL: pages are <site_url>/page/<n>."},
            "pages": {"type": "integer", "minimum": 1, "maximum": 1_000_000, "default": 10_000,
                      "description": "How many pages the generated site has."},
            "latency_ms": {"type": "integer", "minimum": 0, "maximum": 10_000, "default": 20,
                           "description": "Simulated latency of each page, in milliseconds."},
            "error_rate": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.01,
                           "description": "Share of pages whose first request fails with a "
                                          "503 (retried by the tool's retry policy)."},
            # A step ends when its slowest page is in: a batch of several rounds of
            # `concurrency` pages keeps the slots busy (80: ten rounds of 8; at 25, the
            # fourth round was one page with seven slots idle).
            "batch": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 80,
                      "description": "Pages fetched per step."},
            "concurrency": {"type": "integer", "minimum": 1, "maximum": 32, "default": 8,
                            "description": "Pages of a batch fetched at once (ctx.map)."},
        },
    }
    # A step fetches `batch` pages; checkpoint every 10 steps (800 pages by default) or
    # 10 seconds. A crash costs at most that much replay, read from the effect log.
    checkpoint_every = 10
    checkpoint_seconds = 10.0

    def start(self, inputs):
        params = site.site_params(inputs["pages"], inputs["latency_ms"], inputs["error_rate"])
        state = site.new_crawl(inputs["site_url"].rstrip("/"), params)
        state["batch"] = inputs["batch"]
        state["concurrency"] = inputs["concurrency"]
        return state

    def step(self, ctx, state):
        crawl = site.CrawlState(state)
        if state["generation"] is None:  # the first step stamps the site's generation
            state["generation"] = self.changes(ctx, state)["generation"]
        if state["drift"] and not ctx.is_replaying:
            # on_resume found changed pages. Queue them only once no logged step is
            # left to replay: a replayed step must see the state it saw the first time.
            self.requeue(ctx, crawl, state["drift"])
            state["drift"] = None
        # Every page found is fetched? Unless some changed meanwhile (fetch those again), done.
        if not crawl.frontier and not self.requeue(ctx, crawl, self.changes(ctx, state)):
            return Done(crawl.report())
        batch = crawl.take(state["batch"])
        # Fetched at once, taken in the order asked: the same pages in the same order
        # on every replay, whichever answered first.
        fetched = ctx.map(site.fetch_page, [crawl.url(n) for n in batch],
                          max_concurrency=state.get("concurrency", 1), return_exceptions=True)
        for n, page in zip(batch, fetched, strict=True):
            if not isinstance(page, ToolFailedError):
                crawl.add_page(page)
            elif not page.permanent:
                # Unreachable for longer than the retry policy waits (or an operator
                # gave up): not a fact about the page, so not a failed page. The run
                # fails; retrying it fetches the page again.
                raise page
            else:
                crawl.add_failure(n, page.message)  # the page does not exist (404)
        ctx.progress(crawl.fetched, len(crawl.seen), crawl.summary())
        return crawl.dump()

    def on_resume(self, ctx, state):
        """Back after a crash, deploy or pause: did the site change while we were away?"""
        if state["generation"] is None:  # away before the first step: nothing fetched yet
            return state
        try:
            changes = self.changes(ctx, state)
        except ToolFailedError as failure:  # no harm: the last step checks again
            ctx.log(f"could not check the site's generation: {failure.message}")
            return state
        if changes["generation"] != state["generation"]:
            ctx.log(f"the site moved to generation {changes['generation']} while the crawl "
                    f"was away ({ctx.suspended_for:.0f} s); changed pages will be fetched again")
            state["drift"] = changes
        return state

    def changes(self, ctx, state) -> dict:
        return ctx.call(site.site_generation, state["site"], state["params"]["pages"],
                        state["generation"] or 0)

    def requeue(self, ctx, crawl, changes) -> list[int]:
        old = crawl.state["generation"]
        if changes["generation"] <= old:
            return []
        again = crawl.requeue_changed(changes["generation"], changes["changed"])
        ctx.log(f"site generation {old} → {changes['generation']}: "
                f"{len(again)} fetched pages changed and are queued again")
        return again


# --- migrate -------------------------------------------------------------------------------------
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


# --- assistant -----------------------------------------------------------------------------------
SYSTEM_PROMPT = (
    "You are a research assistant for a website. Use search_pages to find pages, calculator "
    "for any arithmetic and write_note to save what you found; then answer in a few sentences, "
    "citing the numbers your tools returned.")


CHAT_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["message"],
               "properties": {"message": {"type": "string", "maxLength": 8000},
                              "end": {"type": "boolean"}}}


@agent("assistant", version="2")
class Assistant(Agent):
    """A tool-using chat agent over an OpenAI-compatible API (scripted offline model by default)."""

    # Its model calls are metered: a run waits when it has spent this (the launch
    # form's budget field overrides it; docs/budgets.md).
    default_budget = {"cost": 0.25}
    # With approve_notes the owner says yes to each note, title and body shown, before
    # it is written; a denied note is an error the model sees (docs/approvals.md).
    approvals = ({"tool": research.write_note.name, "approvers": "owner", "fallback": "deny",
                  "when": "'approve_notes' in inputs and inputs.approve_notes"},)
    conversation = "messages"  # the run page shows them as a chat and takes follow-ups

    input_schema = {
        "type": "object",
        "properties": {
            "question": {"type": "string", "format": "textarea", "minLength": 1,
                         "description": "What to ask.",
                         "default": "Which pages mention a boat or the city, and how many "
                                    "are there?"},
            "follow_ups": {"type": "array", "items": {"type": "string", "minLength": 1},
                           "default": [], "description": "Further questions, asked in turn "
                                                         "after each answer (a JSON list)."},
            "base_url": {"type": "string", "default": default_base_url(),
                         "description": "OpenAI-compatible API base URL (…/v1). The API key "
                                        "comes from AGENTOPS_LLM_API_KEY on the worker."},
            "model": {"type": "string", "default": default_model()},
            "site_url": {"type": "string", "default": f"{SANDBOX}/site",
                         "description": "The site search_pages searches."},
            "site_pages": {"type": "integer", "minimum": 1, "default": 10_000},
            "latency_ms": {"type": "integer", "minimum": 0, "maximum": 10_000, "default": 20},
            "search_scan": {"type": "integer", "minimum": 1, "maximum": 2000, "default": 100,
                            "description": "How many pages (from page 0) a search reads."},
            "target_url": {"type": "string", "default": f"{SANDBOX}/api",
                           "description": "Where write_note stores notes (<target_url>/records)."},
            "max_turns": {"type": "integer", "minimum": 1, "maximum": 50, "default": 8,
                          "description": "Model calls per question before it must answer."},
            "approve_notes": {"type": "boolean", "default": False,
                              "description": "You approve each note (its title and body) "
                                             "before write_note stores it."},
            "chat": {"type": "boolean", "default": True,
                     "description": "After the last question, wait for the user's next "
                                    "message (a chat) instead of finishing."},
            "tool_concurrency": {"type": "integer", "minimum": 1, "maximum": 16, "default": 4,
                                 "description": "Tool calls of one model turn run at once."},
        },
    }

    tools = research.SPECS  # what the model may call (see plan_tool)

    def start(self, inputs):
        questions = [inputs["question"], *inputs["follow_ups"]]
        return {
            "inputs": inputs,
            "messages": [{"role": "system", "content": SYSTEM_PROMPT},
                         {"role": "user", "content": questions[0]}],
            "plan": {"questions": questions, "current": 0},
            "memory": [],   # what the tools returned, in short
            "pending": [],  # tool calls the model asked for: think → act
            "answers": [],
            "turns": 0,     # model calls for the current question
            "tool_calls": 0,
            "usage": {"prompt_tokens": 0, "completion_tokens": 0},
        }

    def step(self, ctx, state):
        if state.get("listening"):
            return self.listen(ctx, state)
        return self.act(ctx, state) if state["pending"] else self.think(ctx, state)

    def listen(self, ctx, state):
        """Wait (durably, holding no worker) for the user's next message."""
        said = ctx.wait_for_input("Your message to the assistant", schema=CHAT_SCHEMA)
        state["listening"] = False
        if said.get("end") and not said.get("message"):
            return Done(self.output(state))
        plan = state["plan"]
        plan["questions"].append(said["message"])
        state["messages"].append({"role": "user", "content": said["message"]})
        state["turns"] = 0
        if said.get("end"):
            state["inputs"] = {**state["inputs"], "chat": False}  # answer this one, then end
        return state

    def output(self, state) -> dict:
        answers = state["answers"]
        return {"answer": answers[-1]["answer"] if answers else "", "answers": answers,
                "memory": state["memory"], "tool_calls": state["tool_calls"],
                "usage": state["usage"]}

    def think(self, ctx, state):
        """Ask the model what to do next: call tools, or answer."""
        inputs = state["inputs"]
        state["turns"] += 1
        last_turn = state["turns"] >= inputs["max_turns"]
        tools = [] if last_turn else self.tools  # no tools on the last turn: it must answer
        reply = ctx.call(chat_completion, inputs["base_url"], inputs["model"], state["messages"],
                         tools)
        message = {"role": "assistant", **reply["message"]}
        state["messages"].append(message)
        for key in state["usage"]:
            state["usage"][key] += reply["usage"].get(key, 0)
        if message.get("tool_calls"):
            state["pending"] = message["tool_calls"]
            ctx.log("model calls " + ", ".join(c["function"]["name"] for c in state["pending"]))
            return state
        plan = state["plan"]
        state["answers"].append({"question": plan["questions"][plan["current"]],
                                 "answer": message.get("content") or ""})
        ctx.log(f"answer {plan['current'] + 1}/{len(plan['questions'])}: "
                f"{state['answers'][-1]['answer']}")
        ctx.progress(plan["current"] + 1, len(plan["questions"]))
        plan["current"] += 1
        if plan["current"] == len(plan["questions"]):
            if inputs.get("chat"):
                state["listening"] = True
                return state
            return Done(self.output(state))
        state["messages"].append({"role": "user", "content": plan["questions"][plan["current"]]})
        state["turns"] = 0
        return state

    def act(self, ctx, state):
        """Run the tool calls the model asked for, at once (ctx.parallel: their results
        in the order the model asked, on every replay); they go back as tool messages."""
        planned = [self.plan_tool(ctx, state, call) for call in state["pending"]]
        made = iter(ctx.parallel([p for p in planned if isinstance(p, Call)],
                                 max_concurrency=state["inputs"].get("tool_concurrency", 4),
                                 return_exceptions=True))
        for call, plan in zip(state["pending"], planned, strict=True):
            result = plan
            if isinstance(plan, Call):  # the model sees a tool's failure and may try again
                result = next(made)
                if isinstance(result, ToolFailedError):
                    result = {"error": result.message}
            state["tool_calls"] += 1
            state["memory"].append(remember(call["function"]["name"], result))
            state["messages"].append({"role": "tool", "tool_call_id": call["id"],
                                      "content": json.dumps(result)})
        state["pending"] = []
        return state

    def plan_tool(self, ctx, state, call: dict):
        """The Call a tool call of the model asks for, or the error the model gets back."""
        inputs, name = state["inputs"], call["function"]["name"]
        try:
            args = json.loads(call["function"]["arguments"] or "{}")
            if name == "search_pages":
                params = site.site_params(inputs["site_pages"], inputs["latency_ms"], 0.0)
                how = (research.search_pages, inputs["site_url"].rstrip("/"), params,
                       inputs["search_scan"], str(args["query"]))
            elif name == "calculator":
                how = (research.calculator, str(args["expression"]))
            elif name == "write_note":
                how = (research.write_note, inputs["target_url"].rstrip("/"),
                       f"{ctx.run_id}-note-{call['id']}", str(args["title"]), str(args["body"]))
            else:
                return {"error": f"there is no tool named {name!r}"}
        except (ValueError, KeyError, TypeError) as exc:  # the model sent bad arguments
            return {"error": f"bad arguments for {name}: {exc}"}
        return Call(*how)


def remember(name: str, result) -> str:
    """One line of working memory from a tool result."""
    if "error" in result:
        return f"{name} failed: {result['error']}"
    if name == "search_pages":
        top = result["hits"][0]["title"] if result["hits"] else "none"
        return f"search '{result['query']}': {result['count']} pages match, top: {top}"
    if name == "calculator":
        return f"calculator: {result['expression']} = {result['result']}"
    return f"note {result['id']}: {result['title']}"


# --- SDK agents made durable ---------------------------------------------------------------------
# A Pydantic AI agent and an OpenAI Agents SDK agent, each wrapped by runs.adapters.durable;
# registered only where their SDK is installed.
from . import sdk_agents  # noqa: E402,F401
