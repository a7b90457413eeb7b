"""A session's checkpoints as it writes them: each one the state in full, or a patch against
the previous checkpoint of its branch when the state is past a few hundred bytes and the
chain of patches still lighter than CHAIN_WEIGHT full checkpoints (runs/durable/serde.py
says why and how long)."""

from __future__ import annotations

import time

from . import records as r
from . import serde


class CheckpointWriter:
    def __init__(self):
        self._base: tuple[int, int, bytes] | None = None  # (number, branch, raw JSON)
        self._chain = serde.Chain()
        self.skipped = False  # a step left its state as it was since the last checkpoint

    def resumed(self, loaded: r.Loaded) -> bytes:
        """The raw JSON of the latest checkpoint of `loaded`: the next one may patch it."""
        raw = serde.resolve_raw(loaded.bases + [loaded.checkpoint])
        self._base = (loaded.checkpoint.number, loaded.checkpoint.branch, raw)
        self._chain = serde.Chain.of(loaded.bases, loaded.checkpoint)
        return raw

    def record(self, state, step_no: int, branch: int, reason: str
               ) -> tuple[r.CheckpointRecord | None, bytes]:
        """The checkpoint of `state` (numbered by the store), and its raw JSON. None for
        a step's state that is the previous checkpoint's of this branch: a step that
        changed nothing writes no checkpoint (its effects are replayed on a resume, as
        those of a step checkpoint_every leaves out)."""
        raw = serde.raw_state(state)
        if reason == "step" and self._base is not None and self._base[1:] == (branch, raw):
            self.skipped = True
            return None, raw
        blob, codec, base_number = self._encoded(raw, branch)
        checkpoint = r.CheckpointRecord(number=0, branch=branch, step_no=step_no, blob=blob,
                                        codec=codec, reason=reason, created_at=time.time(),
                                        base_number=base_number)
        return checkpoint, raw

    def written(self, number: int, checkpoint: r.CheckpointRecord, raw: bytes) -> None:
        """`checkpoint` was committed as `number`: the next one may patch it."""
        self._base = (number, checkpoint.branch, raw)
        self.skipped = False
        self._chain = self._chain.after(checkpoint.blob,
                                        patched=checkpoint.base_number is not None)

    def _encoded(self, raw: bytes, branch: int):
        """(blob, codec, base_number): a patch against the previous checkpoint of this
        branch when the state is past serde.PATCH_ABOVE and the chain may grow
        (serde.Chain), else a full one."""
        base = self._base
        if (base is not None and base[1] == branch and len(raw) > serde.PATCH_ABOVE
                and self._chain.may_extend(raw)):
            patch = serde.encode_patch(raw, base[2])
            if self._chain.worth(patch, raw):
                return patch, serde.PATCH_CODEC, base[0]
        blob, codec = serde.encode_raw(raw)
        return blob, codec, None
