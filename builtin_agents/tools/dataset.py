"""The migration agent's tools: read the source, write the target, verify, notify.

The business rule of the migration, ``transform``, and the order-independent
``checksum`` live with the generated dataset (sandbox/dataset.py), so that the
tests and the agent agree on what a correct copy is.

Writes go through the sandbox's records API, one record per batch, each under
the engine's idempotency key: a batch written again after a crash is answered
from the stored response, not written twice. The cut-over notification is not
idempotent: if a worker dies during it, the run asks an operator.
"""

from __future__ import annotations

from collections import Counter

from runs.durable import PermanentToolError, tool
from sandbox.dataset import checksum, transform  # noqa: F401  (re-exported for the agent)

from .http import HTTP_RETRY, TransientHTTPError, request

MAX_VERIFY_RECORDS = 10_000  # the records API lists at most this many at once


def add_checksums(a: str, b: str) -> str:
    """Checksums of two sets of rows combine by addition mod 2**64."""
    return f"{(int(a, 16) + int(b, 16)) % 2**64:016x}"


ZERO = f"{0:016x}"


@tool(idempotent=True, retry=HTTP_RETRY)
def read_rows(source: str, offset: int, limit: int, total: int, seed: int, *,
              idempotency_key: str) -> dict:
    """One page of source rows. The source's checksum is checked against the rows received."""
    response = request("GET", source, idempotency_key=idempotency_key,
                       params={"offset": offset, "limit": limit, "total": total, "seed": seed})
    body = response.json()
    if checksum(body["rows"]) != body["checksum"]:
        raise TransientHTTPError(response.status_code, source, "rows do not match their checksum")
    return {"rows": body["rows"], "next_offset": body["next_offset"], "checksum": body["checksum"]}


@tool(idempotent=True, retry=HTTP_RETRY)
def write_batch(target: str, unit: str, rows: list, *, idempotency_key: str) -> dict:
    """POST one batch as one record. Returns what the target stored (not the rows)."""
    payload = {"unit": unit, "count": len(rows), "checksum": checksum(rows), "rows": rows}
    response = request("POST", f"{target}/records", json=payload,
                       idempotency_key=idempotency_key)
    stored = response.json()
    rows = stored["payload"]["rows"]
    return {"id": stored["id"], "unit": stored["payload"]["unit"], "count": len(rows),
            "checksum": checksum(rows),
            "replayed": response.headers.get("Idempotent-Replayed") == "true"}


@tool(idempotent=True, retry=HTTP_RETRY)
def read_back(target: str, key_prefix: str, *, idempotency_key: str) -> dict:
    """Everything the target holds under ``key_prefix``: records, rows, checksum, units."""
    response = request("GET", f"{target}/records", idempotency_key=idempotency_key,
                       params={"prefix": key_prefix, "limit": MAX_VERIFY_RECORDS})
    body = response.json()
    if body["count"] > len(body["records"]):
        raise PermanentToolError(f"{body['count']} records: too many to verify in one read")
    rows = [row for record in body["records"] for row in record["payload"].get("rows", [])]
    units = Counter(record["unit"] for record in body["records"])
    return {"records": body["count"], "rows": len(rows), "checksum": checksum(rows),
            "duplicate_units": sorted(u for u, n in units.items() if n > 1)}


# Not idempotent: every call is a new notification, so it is retried only when it never
# reached the target (connection refused, 429); an in-doubt call goes to an operator.
@tool(retry=HTTP_RETRY)
def notify(target: str, message: dict) -> dict:
    response = request("POST", f"{target}/notifications", json=message)
    body = response.json()
    return {"id": body["id"], "count": body["count"]}
