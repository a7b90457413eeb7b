"""Where a session's patch chain ends (runs/durable/checkpoints.py, serde.Chain): by size,
not by a count of patches. A new full checkpoint when the chain's patches would outweigh
the full one they rest on, or when a resume would decode too much along the chain."""

import random

from runs.durable import serde
from runs.durable.checkpoints import CheckpointWriter


def chunk(n: int) -> str:
    return random.Random(n).randbytes(256).hex()  # 512 characters that barely compress


def written(state_of, steps: int) -> list:
    """The checkpoints of `steps` steps, each state_of(step), as a session writes them."""
    writer, checkpoints = CheckpointWriter(), []
    for step in range(steps):
        checkpoint, raw = writer.record(state_of(step), step, 1, "step")
        checkpoint.number = step + 1
        writer.written(checkpoint.number, checkpoint, raw)
        checkpoints.append(checkpoint)
    return checkpoints


def big_state(step: int) -> dict:
    """400 chunks (200 KB), of which one changes a step."""
    chunks = [chunk(k) for k in range(400)]
    for done in range(1, step + 1):
        chunks[done % 400] = chunk(10_000 + done)
    return {"i": step, "chunks": chunks}


def test_a_chain_of_small_patches_goes_on_past_a_hundred():
    checkpoints = written(big_state, 130)
    kinds = [c.codec == serde.PATCH_CODEC for c in checkpoints]
    assert kinds == [False] + [True] * 129  # (a count of 100 wrote a full one at step 101)
    assert sum(c.size for c in checkpoints[1:]) <= checkpoints[0].size
    assert serde.checkpoint_state(checkpoints[-1], checkpoints) == big_state(129)


def test_a_chain_ends_when_its_patches_would_outweigh_its_full_checkpoint(monkeypatch):
    monkeypatch.setattr(serde, "encode_patch", lambda raw, base: b"p" * 3000)
    checkpoints = written(big_state, 200)
    fulls = [c.number for c in checkpoints if c.codec != serde.PATCH_CODEC]
    assert len(fulls) >= 3
    for start, end in zip(fulls, fulls[1:]):  # each chain: as many patches as fit
        full = checkpoints[start - 1].size
        patches = end - start - 1
        assert patches * 3000 <= full < (patches + 1) * 3000, (start, end, full)


def test_a_chain_ends_at_what_a_resume_may_decode(monkeypatch):
    size = len(serde.raw_state(big_state(0)))
    monkeypatch.setattr(serde, "CHAIN_DECODE_BYTES", 10 * size + size // 2)
    kinds = [c.codec == serde.PATCH_CODEC for c in written(big_state, 23)]
    assert kinds == ([False] + [True] * 10) * 2 + [False]


def test_a_state_of_a_few_kib_is_patched():
    """A chat history past 2 KiB: its step costs its new message, not the history."""
    def chat(step):
        return {"messages": [chunk(k) for k in range(8 + step)]}  # 4 KiB, + 512 B a step

    checkpoints = written(chat, 6)
    assert [c.codec == serde.PATCH_CODEC for c in checkpoints] == [False] + [True] * 5
    assert all(c.size < 600 for c in checkpoints[1:]), [c.size for c in checkpoints]
