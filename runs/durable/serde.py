"""State and result encoding: JSON, compressed with zstandard above a threshold.

A value that JSON cannot hold is reported with the path of the offending key,
so the agent author knows what to fix.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import zstandard

from .errors import StateNotSerializableError, StateTooLargeError

COMPRESS_ABOVE = 1024
MAX_STATE_BYTES = 64 * 1024 * 1024
# A state above this size is stored as a zstd patch against the previous
# checkpoint's JSON (like `zstd --patch-from`): a state that changes a little
# costs about the change, not the state. A chain of patches ends with a full
# checkpoint, which a resume decodes first, then every patch after it.
#
# Where a chain ends is chosen by size, not by a count of patches. A new full
# checkpoint is written when the chain's patches would outweigh CHAIN_WEIGHT full
# ones of the size they rest on: the full one's cost spread over the chain is then
# at most a CHAIN_WEIGHT-th of the patches' own, so a step costs about 1 + 1/4 times
# its patch (a count of 100 made a 1 MiB state changing 1 KiB a step cost 7.8 KiB a
# step: its 552 KB base every 100 steps; a weight of 1 made a chat history growing
# by a 500 B message a step store its 240 B patch twice: its full checkpoints took
# 369 B/step of TOAST on PostgreSQL, 82 at a weight of 4).
# And when a resume would decode more than CHAIN_DECODE_BYTES along the chain (each
# patch decodes to a whole state): that bounds a resume's time whatever the
# change, a few bytes a step on a large state included (1 MiB patches decode in
# 0.2-0.4 ms here quiet, 1.1 ms loaded: 512 of them take 0.1-0.6 s; a 100 KB chat
# history's in 0.06 ms: the 600 of its chain at a weight of 4 in about 36 ms).
# Below PATCH_ABOVE a full checkpoint is as small as a patch: a patch of a few
# hundred bytes is mostly its own frame. Above it a patch costs 0.05-0.08 ms
# against a full one's 0.02 ms (a 1-2 KiB chat history here) and stores a quarter
# to a half of it.
PATCH_ABOVE = 512
CHAIN_WEIGHT = 4
CHAIN_DECODE_BYTES = 512 * 1024 * 1024
PATCH_CODEC = "json+zstd-patch"
_PATCH_LEVEL = 6  # with long-distance matching: a 1 KB change in 1 MB patches to < 1 KB
_JSON_SCALARS = (str, int, float, bool, type(None))
# Inputs, results and outputs land in PostgreSQL jsonb columns, which refuse
# "\u0000" with an error mid-commit; refusing it here names the key instead.
_NUL = "string with a NUL character (\\u0000)"
_compressor = zstandard.ZstdCompressor(level=3)
_decompressor = zstandard.ZstdDecompressor()


def check_serializable(value, path: str = "") -> None:
    """Walk a value and raise StateNotSerializableError at the first leaf that
    JSON (or a jsonb column) cannot hold."""
    if isinstance(value, _JSON_SCALARS):
        if isinstance(value, float) and value != value:
            raise StateNotSerializableError(path, "NaN float")
        if isinstance(value, str) and "\x00" in value:
            raise StateNotSerializableError(path, _NUL)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise StateNotSerializableError(f"{path}[{key!r}]", f"key of type {type(key).__name__}")
            if "\x00" in key:
                raise StateNotSerializableError(f"{path}[{key!r}]", f"key with {_NUL}")
            check_serializable(item, f"{path}.{key}" if path else key)
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            check_serializable(item, f"{path}[{index}]")
        return
    raise StateNotSerializableError(path, type(value).__name__)


_PLAIN = frozenset((str, int, float, bool, type(None)))


def _keys_are_strings(value) -> bool:
    """Whether every dict key in a JSON-serialisable value is a str: the one thing
    json.dumps lets through that a restore would not give back. A walk of the
    containers only (a sixth of the time of the dumps of a 200-message chat history)."""
    plain = _PLAIN
    stack = [value]
    push, pop = stack.append, stack.pop
    while stack:
        container = pop()
        if isinstance(container, dict):
            for key, item in container.items():
                if type(key) is not str:
                    return False
                if type(item) not in plain:
                    push(item)
        elif isinstance(container, (list, tuple)):
            for item in container:
                if type(item) not in plain:
                    push(item)
    return True  # what is left is a subclass of a scalar, which dumps wrote as one


def canonical(value):
    """`value` as every replay gives it back: JSON's own types (a tuple is a list),
    each object's keys sorted. A store may not keep the order of keys (PostgreSQL's
    jsonb sorts them its own way); a live call that handed the step its own order
    would let a replay see other bytes (an SDK serialising a tool's result for the
    model) or iterate keys in another order than the run it replays."""
    if isinstance(value, _JSON_SCALARS):
        return value
    return json.loads(json.dumps(value, sort_keys=True, ensure_ascii=False))


def dumps(value) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        check_serializable(value)
        raise


def raw_state(state) -> bytes:
    """The state as compact JSON bytes, within the size limit."""
    raw = dumps(state).encode()
    if not _keys_are_strings(state):
        # json.dumps writes {3: 1} as {"3": 1}: the run would resume with another state
        # than the one it returned, and behave differently after a crash than without.
        check_serializable(state)
    if len(raw) > MAX_STATE_BYTES:
        raise StateTooLargeError(len(raw), MAX_STATE_BYTES)
    return raw


def encode_raw(raw: bytes) -> tuple[bytes, str]:
    """A full (self-contained) encoding: (blob, "json" or "json+zstd")."""
    if len(raw) > COMPRESS_ABOVE:
        return _compressor.compress(raw), "json+zstd"
    return raw, "json"


def encode_state(state) -> tuple[bytes, str]:
    """Return (blob, codec) of a full checkpoint; codec is "json" or "json+zstd"."""
    return encode_raw(raw_state(state))


@dataclass
class Chain:
    """The patches since the last full checkpoint of a session's branch."""

    length: int = 0
    patch_bytes: int = 0
    full_bytes: int = 0

    def may_extend(self, raw: bytes) -> bool:
        """Whether a resume may decode one more patch of a state this size (its
        patches decode to states of about this size)."""
        return (self.length + 1) * len(raw) <= CHAIN_DECODE_BYTES

    def worth(self, patch: bytes, raw: bytes) -> bool:
        """Whether a patch beats a full checkpoint here: it is small against the state,
        and the chain's patches with it still weigh no more than CHAIN_WEIGHT times its
        full checkpoint."""
        return (len(patch) < len(raw) // 4
                and self.patch_bytes + len(patch) <= CHAIN_WEIGHT * self.full_bytes)

    def after(self, blob: bytes, patched: bool) -> Chain:
        if not patched:
            return Chain(full_bytes=len(blob))
        return Chain(self.length + 1, self.patch_bytes + len(blob), self.full_bytes)

    @classmethod
    def of(cls, bases, checkpoint) -> Chain:
        """The chain a resume continues: `bases` (full first), then `checkpoint`."""
        full, *patches = [*bases, checkpoint]
        return cls(len(patches), sum(c.size for c in patches), full.size)


def encode_patch(raw: bytes, base_raw: bytes) -> bytes:
    params = zstandard.ZstdCompressionParameters.from_level(
        _PATCH_LEVEL, window_log=max(20, (len(raw) + len(base_raw)).bit_length()), enable_ldm=True)
    return zstandard.ZstdCompressor(dict_data=_raw_dict(base_raw),
                                    compression_params=params).compress(raw)


def decode_raw(blob: bytes, codec: str, base_raw: bytes | None = None) -> bytes:
    if codec == "json":
        return bytes(blob)
    if codec == "json+zstd":
        return _decompressor.decompress(blob)
    if codec == PATCH_CODEC:
        if base_raw is None:
            raise ValueError("a patch checkpoint needs its base checkpoint")
        return zstandard.ZstdDecompressor(dict_data=_raw_dict(base_raw),
                                          max_window_size=1 << 31).decompress(blob)
    raise ValueError(f"unknown checkpoint codec {codec!r}")


def decode_state(blob: bytes, codec: str):
    return json.loads(decode_raw(blob, codec))


def resolve_raw(chain) -> bytes:
    """Raw JSON of the last checkpoint in `chain` (full first, then its patches)."""
    raw = None
    for checkpoint in chain:
        raw = decode_raw(checkpoint.blob, checkpoint.codec, raw)
    return raw


def chain_to(target, checkpoints) -> list:
    """The checkpoints `target` needs to be decoded: its base chain, then itself."""
    by_number = {c.number: c for c in checkpoints}
    chain = [target]
    while chain[-1].codec == PATCH_CODEC:
        chain.append(by_number[chain[-1].base_number])
    return chain[::-1]


def checkpoint_state(target, checkpoints):
    """The state of `target`, resolving patches against the other `checkpoints`."""
    return json.loads(resolve_raw(chain_to(target, checkpoints)))


def _raw_dict(base_raw: bytes):
    return zstandard.ZstdCompressionDict(base_raw, dict_type=zstandard.DICT_TYPE_RAWCONTENT)


def digest(name: str, args, kwargs) -> str:
    """A stable digest of a call, for matching replays to the log."""
    payload = json.dumps([name, args, kwargs], sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def preview(args, kwargs, limit: int = 200) -> str:
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    text = ", ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"
