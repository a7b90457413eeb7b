"""The migration's source dataset, served page by page."""

from django.http import JsonResponse
from django.views.decorators.http import require_GET

from .. import dataset
from ..http import api, int_param

MAX_TOTAL = 10_000_000


@require_GET
@api
def rows(request):
    total = int_param(request, "total", dataset.DEFAULT_TOTAL, low=0, high=MAX_TOTAL)
    offset = int_param(request, "offset", 0, low=0, high=MAX_TOTAL)
    limit = int_param(request, "limit", 1000, low=0, high=dataset.MAX_LIMIT)
    seed = int_param(request, "seed", 0, low=0, high=2**31)
    page = dataset.source_rows(offset, limit, seed=seed, total=total)
    end = offset + len(page)
    return JsonResponse(
        {
            "offset": offset,
            "limit": limit,
            "total": total,
            "seed": seed,
            "rows": page,
            "next_offset": end if end < total else None,
            "checksum": dataset.checksum(page),
        }
    )
