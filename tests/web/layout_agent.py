"""An agent whose calls have long arguments without a space to break them at (URLs, the
way a crawl's or a publisher's are), for the layout tests of the pages that list calls
(tests/web/test_browser_layout.py). Each step reads a page (idempotent) and posts a note
about it (not idempotent: a crash after the post leaves it in doubt)."""

from runs.durable import Agent, Done, agent, tool

SOURCE = "https://docs.example.com/reference/very/long/path/that/keeps/going/" + "segment-" * 12


@tool(idempotent=True)
def fetch_source(url: str, *, idempotency_key: str) -> dict:
    return {"url": url, "bytes": len(url)}


@tool
def post_note(target: str, body: str) -> dict:
    return {"posted": len(body)}


@agent("publisher", version="1", input_schema={
    "type": "object",
    "properties": {"steps": {"type": "integer", "minimum": 1, "maximum": 100, "default": 3}},
})
class Publisher(Agent):
    """Reads a page and posts a note about it, once a step."""

    def start(self, inputs):
        return {"i": 0, "n": inputs["steps"]}

    def step(self, ctx, state):
        i = state["i"]
        url = f"{SOURCE}?page={i}&token={'f' * 40}"
        ctx.call(fetch_source, url)
        ctx.call(post_note, f"{url}#notes", "a note about " + url)
        state["i"] = i + 1
        ctx.log(f"posted the note of page {i}")
        ctx.progress(state["i"], state["n"])
        return Done({"notes": state["n"]}) if state["i"] >= state["n"] else state
