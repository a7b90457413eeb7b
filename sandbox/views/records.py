"""The idempotent records API and the non-idempotent notifications API."""

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from .. import idempotency, selectors, services
from ..http import api, int_param

MAX_DELAY_MS = 60_000
MAX_LIST = 10_000


@csrf_exempt  # an API for machines: they send no CSRF token
@require_http_methods(["GET", "POST"])
@api
def records(request):
    if request.method == "GET":
        limit = int_param(request, "limit", 1000, low=0, high=MAX_LIST)
        count, rows = selectors.records_list(prefix=request.GET.get("prefix", ""), limit=limit)
        return JsonResponse({"count": count, "records": rows})
    delay_ms = int_param(
        request, "delay_ms", 0, low=0, high=MAX_DELAY_MS, header="X-Sandbox-Delay-Ms"
    )
    outcome = idempotency.record_post(
        key=request.headers.get("Idempotency-Key", ""),
        raw_body=request.body,
        delay_seconds=delay_ms / 1000,
        fail=request.headers.get("X-Sandbox-Fail", "").strip().lower(),
    )
    response = JsonResponse(outcome.body, status=outcome.status)
    if outcome.replayed:
        response["Idempotent-Replayed"] = "true"
    return response


@require_GET
def record_stats(request):
    return JsonResponse(selectors.record_stats())


@csrf_exempt
@require_http_methods(["GET", "POST"])
@api
def notifications(request):
    if request.method == "GET":
        limit = int_param(request, "limit", 1000, low=0, high=MAX_LIST)
        return JsonResponse(selectors.notifications_summary(limit=limit))
    body = idempotency.parse_payload(request.body)
    notification, count = services.notification_create(
        body=body, idempotency_key=request.headers.get("Idempotency-Key", "")
    )
    return JsonResponse({"id": notification.pk, "count": count}, status=201)


@csrf_exempt
@require_POST
def reset(request):
    """Delete every sandbox row (for test harnesses driving a separate server)."""
    return JsonResponse({"deleted": services.sandbox_reset()})
