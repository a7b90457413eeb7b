"""A paused run whose latest checkpoint holds a state of about 2 MB, like a crawl
past 40%: a list of pages beside the agent's own keys."""

from __future__ import annotations

from runs import services
from runs.durable import serde
from runs.models import Checkpoint, Run
from tests.operator.conftest import drive, launch

PAGES = 7300


def big_state(base: dict) -> dict:
    pages = [{"url": f"https://site.test/p/{i}", "title": f"Page {i}", "words": i % 700,
              "body": f"page {i} " + "lorem ipsum dolor sit amet " * 7} for i in range(PAGES)]
    return {**base, "pages": pages, "frontier": [f"https://site.test/p/{i}" for i in
                                                  range(PAGES, PAGES + 200)]}


def paused_run_with_big_state(user) -> Run:
    """Run a ledger to its end, then give it the big state (an edit: paused, branch 2)."""
    run = launch(user, steps=2)
    drive(run.pk)
    checkpoint = Checkpoint.objects.filter(run_id=run.pk).order_by("-number").first()
    services.run_edit_state(run_id=run.pk, state=big_state(checkpoint.state()), user="setup",
                            reason="a big state")
    return Run.objects.get(pk=run.pk)


def latest_state(run: Run) -> tuple[Checkpoint, dict]:
    checkpoint = (Checkpoint.objects.filter(run_id=run.pk, branch=run.branch)
                  .order_by("-number").first())
    return checkpoint, checkpoint.state()


def state_bytes(state: dict) -> int:
    return len(serde.dumps(state).encode())
