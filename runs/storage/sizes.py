"""What rows cost on PostgreSQL: the bytes of tables' relations (the heap, its TOAST
table and every index of either), by fork. The bench (bench/compare) and the tests of
what a step stores (tests/test_checkpoint_bytes_pg.py) measure with it."""

from __future__ import annotations

from django.db import connection

RELATIONS_SQL = """
WITH t AS (SELECT name::regclass::oid AS oid FROM unnest(%s::text[]) name),
     toast AS (SELECT reltoastrelid AS oid FROM pg_class WHERE oid IN (SELECT oid FROM t)
               AND reltoastrelid <> 0),
     heaps AS (SELECT oid FROM t UNION ALL SELECT oid FROM toast)
SELECT oid FROM heaps UNION ALL SELECT indexrelid FROM pg_index WHERE indrelid IN (SELECT oid FROM heaps)"""


def table_bytes(tables, schema: str = "public", forks=("main",)) -> int:
    """The bytes of `tables` (heap, TOAST, indexes) in `forks`. The default, the data
    ("main") alone, is what rows cost. The free-space and visibility maps ("fsm", "vm")
    are maps of a table's pages, not of its rows: PostgreSQL makes a table's 24 KiB free
    space map once it passes a few pages, and it grows by a page per some 4,000 pages of
    the table (32 MiB). A run of 2+200 steps minus one of 2 (bench/compare/scenarios.py)
    counted three of them, 369 B a step that no further step writes."""
    names = [t if "." in t else f"{schema}.{t}" for t in tables]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT coalesce(sum(pg_relation_size(r.oid, f)), 0) "
                       f"FROM ({RELATIONS_SQL}) r, unnest(%s::text[]) f", [names, list(forks)])
        return int(cursor.fetchone()[0])
