"""The approval book in the database (runs/durable/policies/approvals.py: ApprovalBook)."""

from __future__ import annotations

import uuid
from dataclasses import asdict

from django.db import IntegrityError, transaction
from django.utils import timezone

from runs.durable.policies import approvals as a
from runs.storage.columns import to_dt, to_ts

from .models import Approval


def request_of(row: Approval) -> a.ApprovalRequest:
    return a.ApprovalRequest(
        id=row.id, run_id=row.run_id, key=row.key, digest=row.digest, tool=row.tool,
        args_preview=row.args_preview, rule=row.rule, status=row.status,
        requested_at=to_ts(row.requested_at), deadline=to_ts(row.deadline),
        decided_by=row.decided_by, used_by=row.used_by, arguments=row.arguments,
        decided_at=to_ts(row.decided_at))


class OrmApprovalBook:
    def find(self, run_id, key, digest):
        row = Approval.objects.filter(run_id=run_id, key=key, digest=digest).first()
        return request_of(row) if row else None

    def request(self, call, rule, deadline):
        row = Approval(id=uuid.uuid4().hex, run_id=call.run.id, key=call.key, digest=call.digest,
                       tool=call.tool.name, args_preview=call.record.args_preview[:4000],
                       arguments=a._plain(call.arguments), rule=asdict(rule),
                       deadline=to_dt(deadline))
        try:
            with transaction.atomic():
                row.save(force_insert=True)
        except IntegrityError:  # asked before (a worker that died after asking)
            return self.find(call.run.id, call.key, call.digest)
        return request_of(row)

    def expire(self, request):
        Approval.objects.filter(pk=request.id, status=a.PENDING).update(
            status=a.EXPIRED, decided_at=timezone.now(), decided_by="timeout")
        return request_of(Approval.objects.get(pk=request.id))

    def requests_of(self, run_id: str) -> list[a.ApprovalRequest]:
        return [request_of(row) for row in Approval.objects.filter(run_id=run_id)
                .order_by("requested_at")]

    def use(self, request, key):
        Approval.objects.filter(pk=request.id, used_by="").update(used_by=key)
