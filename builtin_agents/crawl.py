"""The crawl agent: walks the sandbox's generated site breadth-first over HTTP and reports
top terms, a link graph summary and failures; pages that changed since they were fetched
are queued again. The pattern of every built-in agent is in builtin_agents/agents.py."""

from __future__ import annotations

from runs.durable import Agent, Done, ToolFailedError, agent

from .tools import crawl as site
from .tools.http import sandbox_url

SANDBOX = sandbox_url()


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
