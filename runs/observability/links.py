"""Where a run's trace context is kept, so that every claim continues its trace."""

from __future__ import annotations

from django.db import DatabaseError


class OrmTraceLinks:
    """RunTrace rows. A lookup that fails (the database away) gives no context: the
    claim is traced under a new trace rather than failing the run."""

    def get(self, run_id: str) -> str | None:
        from runs.observability.models import RunTrace
        from runs.worker.db import release_connection

        try:
            return RunTrace.objects.filter(pk=run_id).values_list(
                "traceparent", flat=True).first()
        except DatabaseError:
            return None
        finally:
            release_connection()

    def put(self, run_id: str, traceparent: str) -> str:
        """Keep `traceparent` unless the run has one already; return the run's."""
        from runs.observability.models import RunTrace
        from runs.worker.db import release_connection

        try:
            row, _ = RunTrace.objects.get_or_create(run_id=run_id,
                                                    defaults={"traceparent": traceparent})
            return row.traceparent
        except DatabaseError:
            return traceparent
        finally:
            release_connection()


class MemoryTraceLinks:
    """For the engine's own tests on MemoryStore."""

    def __init__(self):
        self.links: dict[str, str] = {}

    def get(self, run_id: str) -> str | None:
        return self.links.get(run_id)

    def put(self, run_id: str, traceparent: str) -> str:
        return self.links.setdefault(run_id, traceparent)
