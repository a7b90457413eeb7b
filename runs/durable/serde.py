"""State and result encoding: JSON, compressed with zstandard above a threshold.

A value that JSON cannot hold is reported with the path of the offending key,
so the agent author knows what to fix.
"""

import hashlib
import json

import zstandard

from .errors import StateNotSerializableError, StateTooLargeError

COMPRESS_ABOVE = 1024
MAX_STATE_BYTES = 64 * 1024 * 1024
_JSON_SCALARS = (str, int, float, bool, type(None))
_compressor = zstandard.ZstdCompressor(level=3)
_decompressor = zstandard.ZstdDecompressor()


def check_serializable(value, path: str = "") -> None:
    """Walk a value and raise StateNotSerializableError at the first non-JSON leaf."""
    if isinstance(value, _JSON_SCALARS):
        if isinstance(value, float) and value != value:
            raise StateNotSerializableError(path, "NaN float")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise StateNotSerializableError(f"{path}[{key!r}]", f"key of type {type(key).__name__}")
            check_serializable(item, f"{path}.{key}" if path else key)
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            check_serializable(item, f"{path}[{index}]")
        return
    raise StateNotSerializableError(path, type(value).__name__)


def dumps(value) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        check_serializable(value)
        raise


def encode_state(state) -> tuple[bytes, str]:
    """Return (blob, codec); codec is "json" or "json+zstd"."""
    raw = dumps(state).encode()
    if len(raw) > MAX_STATE_BYTES:
        raise StateTooLargeError(len(raw), MAX_STATE_BYTES)
    if len(raw) > COMPRESS_ABOVE:
        return _compressor.compress(raw), "json+zstd"
    return raw, "json"


def decode_state(blob: bytes, codec: str):
    if codec == "json+zstd":
        blob = _decompressor.decompress(blob)
    elif codec != "json":
        raise ValueError(f"unknown checkpoint codec {codec!r}")
    return json.loads(blob)


def digest(name: str, args, kwargs) -> str:
    """A stable digest of a call, for matching replays to the log."""
    payload = json.dumps([name, args, kwargs], sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def preview(args, kwargs, limit: int = 200) -> str:
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    text = ", ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"
