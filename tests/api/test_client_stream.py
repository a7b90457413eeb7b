"""The client's follow() against scripted event streams (httpx's MockTransport, no
server): it reads server-sent events through httpx-sse, reconnects with Last-Event-ID
after a stream that closed early or skipped an event, yields every event once and in
order, and says how the run ended. tests/api/test_client_live.py does it across a real
Daphne restart."""

import json

import httpx
import pytest

from agentops.client import Client, NotFound, Unavailable


def event(seq: int) -> str:
    body = {"seq": seq, "kind": "log", "data": {"message": f"line {seq}"},
            "at": "2026-12-01T12:00:00+00:00", "text": f"line {seq}"}
    return f"id: {seq}\ndata: {json.dumps(body)}\n\n"


END = 'event: end\ndata: {"status": "succeeded", "seq": 3}\n\n'


class Streams:
    """Answers each stream request with the next script; records its Last-Event-ID."""

    def __init__(self, *scripts, status=200, content_type="text/event-stream"):
        self.scripts, self.asked = list(scripts), []
        self.status, self.content_type = status, content_type

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.asked.append(request.headers.get("Last-Event-ID"))
        assert request.url.path == "/api/v1/runs/r1/events/stream"
        body = self.scripts.pop(0) if self.scripts else self.scripts_done()
        return httpx.Response(self.status, headers={"content-type": self.content_type},
                              content=body.encode())

    def scripts_done(self) -> str:
        raise AssertionError("the client asked again after the run ended")


def follow(streams: Streams, **options) -> tuple[list[int], Client]:
    client = Client("http://testserver", token="aop_x", transport=httpx.MockTransport(streams))
    return [e.seq for e in client.follow("r1", **options)], client


def test_a_stream_cut_short_is_resumed_after_the_last_event_received():
    streams = Streams("retry: 1000\n\n" + event(1) + ": keep-alive\n\n" + event(2),
                      event(2) + event(3) + END)
    seqs, client = follow(streams)
    assert seqs == [1, 2, 3]  # the second stream's 2 again is not yielded twice
    assert streams.asked == ["0", "2"] and client.connections == 2
    assert (client.last_end.status, client.last_end.seq) == ("succeeded", 3)


def test_a_gap_in_the_stream_asks_again_from_the_last_event_before_it():
    streams = Streams(event(1) + event(3), event(2) + event(3) + END)
    seqs, _ = follow(streams)
    assert seqs == [1, 2, 3] and streams.asked == ["0", "1"]


def test_following_from_an_event_number_starts_after_it():
    streams = Streams(event(3) + END)
    seqs, _ = follow(streams, after=2)
    assert seqs == [3] and streams.asked == ["2"]


def test_a_refusal_is_raised_at_once():
    streams = Streams('{"detail": "No such run."}', status=404,
                      content_type="application/json")
    with pytest.raises(NotFound, match="No such run"):
        follow(streams)
    assert streams.asked == ["0"]


def test_an_answer_that_is_no_event_stream_is_waited_out_then_given_up():
    """A proxy's page with a 200: tried again with a pause, not read as events."""
    streams = Streams(*["<html>maintenance</html>"] * 3, content_type="text/html")
    with pytest.raises(Unavailable, match="no event stream"):
        follow(streams, give_up_after=0.1)
    assert len(streams.asked) >= 2
