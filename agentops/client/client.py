"""The client: one method per endpoint, and follow() for the event stream."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
from httpx_sse import ServerSentEvent, SSEError, connect_sse

from agentops.client.errors import ApiError, Unavailable, error_for
from agentops.client.types import (
    Agent,
    Checkpoint,
    Effect,
    End,
    Event,
    EventPage,
    Message,
    Run,
    RunPage,
)

RETRYABLE = (httpx.TransportError,)


class Client:
    """`base_url`: the server (https://host, without /api/v1); `token`: a personal API
    token (aop_...). `transport`: an httpx transport, for tests."""

    def __init__(self, base_url: str, token: str | None = None, *, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None):
        headers = {"Accept": "application/json", "User-Agent": "agentops-client/1"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.base_url = base_url.rstrip("/")
        self.http = httpx.Client(base_url=f"{self.base_url}/api/v1", headers=headers,
                                 timeout=timeout, transport=transport)
        self.last_end: End | None = None  # how the last followed run ended
        self.connections = 0  # event streams opened by follow(), reconnections included

    def close(self) -> None:
        self.http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- plumbing ------------------------------------------------------------------------
    def _call(self, method: str, path: str, *, json_body=None, params=None,
              headers=None) -> httpx.Response:
        try:
            response = self.http.request(method, path, json=json_body, params=params,
                                         headers=headers)
        except RETRYABLE as exc:
            raise Unavailable(0, f"cannot reach {self.base_url}: {exc}") from exc
        if response.status_code >= 400:
            raise error_for(response.status_code, _body(response))
        return response

    def _json(self, method: str, path: str, **kwargs) -> Any:
        return self._call(method, path, **kwargs).json()

    # --- agents -------------------------------------------------------------------------
    def agents(self) -> list[Agent]:
        return [Agent.from_dict(a) for a in self._json("GET", "/agents")]

    def agent(self, name: str) -> Agent:
        return Agent.from_dict(self._json("GET", f"/agents/{_seg(name)}"))

    # --- runs --------------------------------------------------------------------------
    def launch(self, agent: str, inputs: dict | None = None, *,
               idempotency_key: str | None = None) -> Run:
        """Launch a run. With `idempotency_key` the same call (same key, agent, inputs)
        gives the same run however often it is repeated, for at least 24 hours."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return Run.from_dict(self._json("POST", "/runs", headers=headers,
                                        json_body={"agent": agent, "inputs": inputs or {}}))

    def runs(self, *, status: str = "", agent: str = "", owner: str = "",
             all_users: bool = False, cursor: str = "", limit: int = 50) -> RunPage:
        params = {k: v for k, v in {"status": status, "agent": agent, "owner": owner,
                                    "cursor": cursor, "limit": limit}.items() if v}
        if all_users:
            params["all"] = "true"
        data = self._json("GET", "/runs", params=params)
        return RunPage([Run.from_dict(r) for r in data["runs"]], data["next_cursor"])

    def run(self, run_id: str) -> Run:
        return Run.from_dict(self._json("GET", f"/runs/{_seg(run_id)}"))

    def cancel(self, run_id: str, reason: str = "") -> Run:
        return self._run_post(run_id, "cancel", {"reason": reason})

    def answer(self, run_id: str, value: Any) -> Run:
        """Answer the question the run waits on (`run.attention`: its prompt and schema)."""
        return self._run_post(run_id, "input", {"value": value})

    def send(self, run_id: str, text: str = "", *, end: bool = False) -> Message:
        """A chat message to a chat agent's run, as the run page's box sends it: taken at
        once if the run waits for it, else queued for its next wait. `end`: end the chat."""
        data = self._json("POST", f"/runs/{_seg(run_id)}/messages",
                          json_body={"text": text, "end": end})
        return Message(data["id"], data["state"], data["text"], data["end"],
                       Run.from_dict(data["run"]))

    # --- events, checkpoints, effects ----------------------------------------------------
    def events(self, run_id: str, after: int = 0, limit: int = 500) -> EventPage:
        data = self._json("GET", f"/runs/{_seg(run_id)}/events",
                          params={"after": after, "limit": limit})
        return EventPage([Event.from_dict(e) for e in data["events"]], data["head"],
                         data["more"])

    def checkpoints(self, run_id: str, limit: int = 100) -> list[Checkpoint]:
        return [Checkpoint.from_dict(c) for c in
                self._json("GET", f"/runs/{_seg(run_id)}/checkpoints", params={"limit": limit})]

    def checkpoint(self, run_id: str, number: int) -> Checkpoint:
        return Checkpoint.from_dict(self._json("GET",
                                               f"/runs/{_seg(run_id)}/checkpoints/{number}"))

    def effects(self, run_id: str, limit: int = 200) -> tuple[list[Effect], int]:
        data = self._json("GET", f"/runs/{_seg(run_id)}/effects", params={"limit": limit})
        return [Effect.from_dict(e) for e in data["effects"]], data["total"]

    # --- operators ---------------------------------------------------------------------
    def pause(self, run_id: str, reason: str) -> Run:
        return self._run_post(run_id, "pause", {"reason": reason})

    def resume(self, run_id: str, reason: str, *, upgrade: bool = False) -> Run:
        return self._run_post(run_id, "resume", {"reason": reason, "upgrade": upgrade})

    def rollback_preview(self, run_id: str, checkpoint: int) -> dict:
        return self._json("GET", f"/runs/{_seg(run_id)}/rollback",
                          params={"checkpoint": checkpoint})

    def rollback(self, run_id: str, checkpoint: int, reason: str,
                 then: str | None = None, children: str = "cancel") -> Run:
        """`children`: "cancel" or "keep" the child runs of the spawns it undoes."""
        return self._run_post(run_id, "rollback", {"checkpoint": checkpoint, "reason": reason,
                                                   "then": then, "children": children})

    def edit_state(self, run_id: str, patch: list[dict], reason: str,
                   checkpoint: int | None = None) -> Run:
        return self._run_post(run_id, "state", {"patch": patch, "reason": reason,
                                                "checkpoint": checkpoint})

    def resolve(self, run_id: str, seq: int, resolution: str, reason: str,
                result: Any = None) -> Run:
        return Run.from_dict(self._json(
            "POST", f"/runs/{_seg(run_id)}/effects/{seq}/resolve",
            json_body={"resolution": resolution, "reason": reason, "result": result}))

    def _run_post(self, run_id: str, action: str, body: dict) -> Run:
        return Run.from_dict(self._json("POST", f"/runs/{_seg(run_id)}/{action}",
                                        json_body=body))

    # --- the event stream --------------------------------------------------------------
    def follow(self, run_id: str, after: int = 0, *, give_up_after: float = 300.0,
               read_timeout: float = 60.0) -> Iterator[Event]:
        """Every event of the run after number `after`, each once and in order, until the
        run ends (then `self.last_end` says how). A dropped connection, a restarting
        server or a 503 is waited out: it reconnects with Last-Event-ID, with a growing
        pause, and gives up (Unavailable) after `give_up_after` seconds without a
        connection. Refusals (401, 403, 404) are raised at once."""
        last, delay, failing_since, pruned_before = after, 0.2, None, 0
        self.last_end = None
        while True:
            try:
                for message in self._stream(run_id, last, read_timeout):
                    failing_since, delay = None, 0.2
                    if message.event == "end":
                        data = json.loads(message.data)
                        self.last_end = End(data.get("status", ""), data.get("seq", last), data)
                        return
                    if message.event == "pruned":  # retention deleted those below but status events
                        pruned_before = int(json.loads(message.data).get("before", 0))
                        continue
                    if message.event != "message" or not message.id:
                        continue  # the stream's retry, a keep-alive
                    seq = int(message.id)
                    if seq <= last:
                        continue  # already yielded (never twice)
                    if seq != last + 1 and seq > pruned_before:
                        break  # a gap: ask again from the last one we have
                    event = Event.from_dict(json.loads(message.data))
                    last = seq
                    yield event
                # the stream closed without an end (a server stopping): reconnect at once
                continue
            except (Unavailable, *RETRYABLE):
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > give_up_after:
                    raise Unavailable(0, f"no event stream from {self.base_url} for "
                                         f"{give_up_after:.0f} s") from None
                time.sleep(delay)  # a back-off between attempts, not a synchronisation
                delay = min(delay * 2, 2.0)

    def _stream(self, run_id: str, after: int,
                read_timeout: float) -> Iterator[ServerSentEvent]:
        timeout = httpx.Timeout(self.http.timeout.connect or 10.0, read=read_timeout)
        self.connections += 1
        with connect_sse(self.http, "GET", f"/runs/{_seg(run_id)}/events/stream",
                         headers={"Last-Event-ID": str(after)}, timeout=timeout) as source:
            response = source.response
            if response.status_code >= 400:
                response.read()
                raise error_for(response.status_code, _body(response))
            try:
                yield from source.iter_sse()
            except SSEError as exc:  # a 200 that is no event stream (a proxy's page)
                raise Unavailable(response.status_code, f"no event stream from "
                                                        f"{self.base_url}: {exc}") from None


def _body(response: httpx.Response):
    try:
        return response.json()
    except ValueError:
        return {"detail": response.text[:500] or f"HTTP {response.status_code}"}


def _seg(value: str) -> str:
    from urllib.parse import quote

    return quote(str(value), safe="")


__all__ = ["ApiError", "Client"]
