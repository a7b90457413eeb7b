"""An agent shaped like a crawl, for the run page's tests: it learns the size of its
work as it goes (its progress total grows), checkpoints only every few steps, and fails
in the step its input names."""

from runs.durable import Agent, agent, tool

CHECKPOINT_EVERY = 5


class ListingError(Exception):
    """The listing broke off (the test's chosen failure)."""


@tool(idempotent=True)
def fetch_listing_page(page: int, *, idempotency_key: str) -> dict:
    return {"page": page, "links": 3}


@agent("lister", version="1", input_schema={
    "type": "object",
    "properties": {"fail_at": {"type": "integer", "minimum": 1, "default": 14}},
})
class Lister(Agent):
    checkpoint_every = CHECKPOINT_EVERY

    def start(self, inputs):
        return {"page": 0, "known": 10, "fail_at": inputs["fail_at"]}

    def step(self, ctx, state):
        state["page"] += 1
        found = ctx.call(fetch_listing_page, state["page"])
        state["known"] += found["links"]  # each page links to more than one page
        ctx.progress(state["page"], state["known"])
        if state["page"] == state["fail_at"]:
            raise ListingError(f"the listing broke off at page {state['page']}")
        return state
