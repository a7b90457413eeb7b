from django.db import models


class RunTrace(models.Model):
    """The trace a run belongs to: the W3C traceparent of its launch span.

    A row of its own (no foreign key, like the run's other log rows) rather than a
    column of runs_run: only deployments that trace pay for it, and the run row's
    hot updates stay as they are.
    """

    run_id = models.CharField(primary_key=True, max_length=32)
    traceparent = models.CharField(max_length=55)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"{self.run_id} {self.traceparent}"
