"""Where a session's patch chain ends (runs/durable/checkpoints.py, serde.Chain): by size,
not by a count of patches. A new full checkpoint when the chain's patches would outweigh
CHAIN_WEIGHT full ones of the size they rest on, or when a resume would decode too much
along the chain."""

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


def test_a_chain_ends_when_its_patches_would_outweigh_its_full_checkpoints_weight(monkeypatch):
    patch = 3000 * serde.CHAIN_WEIGHT
    monkeypatch.setattr(serde, "encode_patch", lambda raw, base: b"p" * patch)
    checkpoints = written(big_state, 200)
    fulls = [c.number for c in checkpoints if c.codec != serde.PATCH_CODEC]
    assert len(fulls) >= 3
    for start, end in zip(fulls, fulls[1:]):  # each chain: as many patches as fit
        allowed = serde.CHAIN_WEIGHT * checkpoints[start - 1].size
        patches = end - start - 1
        assert patches * patch <= allowed < (patches + 1) * patch, (start, end, allowed)


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


def test_a_state_under_a_kib_is_patched():
    """Past PATCH_ABOVE (512 B) a step that changes a counter stores the change, not the
    state."""
    def notes(step):
        return {"i": step, "notes": [chunk(k) for k in range(2)]}  # 1 KiB

    checkpoints = written(notes, 4)
    assert [c.codec == serde.PATCH_CODEC for c in checkpoints] == [False] + [True] * 3
    assert all(c.size < 100 for c in checkpoints[1:]), [c.size for c in checkpoints]
    assert serde.checkpoint_state(checkpoints[-1], checkpoints) == notes(3)


WORDS = ("agent", "tool", "call", "result", "state", "plan", "step", "memory", "search",
         "page", "fetch", "summary", "user", "answer")


def message(n: int) -> dict:
    """About 500 bytes of word-like text, compressing as prose does."""
    rng = random.Random(n)
    words = " ".join(rng.choice(WORDS) + str(rng.randrange(1000)) for _ in range(60))
    return {"role": "user", "content": words[:500]}


def test_a_growing_chat_history_stores_about_its_patch_a_step():
    """A step's state costs its patch and a CHAIN_WEIGHT-th of a full checkpoint's share:
    400 steps store 1.51 times their mean patch a step (a weight of 1, each chain's
    patches weighing its full checkpoint, stored 2.26 times). Every checkpoint decodes
    to its own state."""
    def chat(step):
        return {"messages": [message(k) for k in range(step + 1)]}

    checkpoints = written(chat, 400)
    patches = [c.size for c in checkpoints if c.codec == serde.PATCH_CODEC]
    per_step = sum(c.size for c in checkpoints) / len(checkpoints)
    assert per_step <= 1.6 * sum(patches) / len(patches), (per_step, len(patches))
    for step in (0, 1, 57, 398, 399):
        assert serde.checkpoint_state(checkpoints[step], checkpoints) == chat(step)
