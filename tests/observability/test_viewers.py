"""Websocket viewers: counted at the ASGI edge while a socket is open, by kind; and in
multiprocess mode, the viewers of a process that died are not counted any more."""

from __future__ import annotations

import subprocess
import sys

import pytest
from prometheus_client import CollectorRegistry, multiprocess

from runs.observability import metrics
from runs.observability.asgi import CountViewers, socket_kind
from runs.observability.views import _forget_dead_processes
from tests.support.processes import ROOT


def viewers(kind: str) -> float:
    return metrics.VIEWERS.labels(kind)._value.get()


@pytest.mark.asyncio
@pytest.mark.parametrize("accept", [True, False])
async def test_a_socket_counts_from_its_accept_to_its_end(accept):
    seen = {}

    async def app(scope, receive, send):
        if accept:
            await send({"type": "websocket.accept"})
        seen["during"] = viewers("run")
        await receive()  # until the client goes
        await send({"type": "websocket.close", "code": 1000})

    sent = []

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "websocket.disconnect", "code": 1001}

    before = viewers("run")
    await CountViewers(app)({"type": "websocket", "path": "/ws/runs/abc/"}, receive, send)
    assert seen["during"] == before + (1 if accept else 0)
    assert viewers("run") == before
    assert [m["type"] for m in sent] == (["websocket.accept"] if accept else []) + \
        ["websocket.close"]


@pytest.mark.asyncio
async def test_a_consumer_that_fails_still_gives_its_viewer_back():
    async def app(scope, receive, send):
        await send({"type": "websocket.accept"})
        raise RuntimeError("consumer bug")

    async def send(message):
        pass

    before = viewers("operator")
    with pytest.raises(RuntimeError):
        await CountViewers(app)({"type": "websocket", "path": "/ws/operator/"}, None, send)
    assert viewers("operator") == before


def test_sockets_are_named_by_their_path():
    assert [socket_kind(p) for p in ("/ws/runs/", "/ws/runs/0123/", "/ws/operator/", "/x")] == \
        ["run_list", "run", "operator", "other"]


def test_the_viewers_of_a_process_that_died_are_forgotten_its_counters_kept(tmp_path):
    child = ("from runs.observability import metrics\n"
             "metrics.VIEWERS.labels('run').inc(3)\n"
             "metrics.LAUNCHES.labels('steps').inc(2)\n")
    subprocess.run([sys.executable, "-c", child], cwd=ROOT, check=True,
                   env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)})

    def values():
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=str(tmp_path))
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in registry.collect() for s in family.samples}

    assert values()[("agentops_websocket_viewers", (("socket", "run"),))] == 3
    _forget_dead_processes(str(tmp_path))
    after = values()
    assert ("agentops_websocket_viewers", (("socket", "run"),)) not in after
    assert after[("agentops_runs_launched_total", (("agent", "steps"),))] == 2
