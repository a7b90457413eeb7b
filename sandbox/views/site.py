"""The generated site the crawler walks (content comes from sandbox.site)."""

import time

from django.http import JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from .. import selectors, services, site
from ..http import api, float_param, int_param

MAX_PAGES = 1_000_000
MAX_LATENCY_MS = 10_000


def _site_params(request) -> tuple[int, int, float]:
    pages = int_param(request, "pages", 10_000, low=1, high=MAX_PAGES, env="AGENTOPS_SANDBOX_PAGES")
    latency_ms = int_param(
        request, "latency_ms", 20, low=0, high=MAX_LATENCY_MS, env="AGENTOPS_SANDBOX_LATENCY_MS"
    )
    error_rate = float_param(request, "error_rate", 0.0, low=0.0, high=1.0)
    return pages, latency_ms, error_rate


def _page_url(request, n: int) -> str:
    # Links carry the request's own query string, so a crawl started with
    # ?pages=200&latency_ms=0 stays on that site.
    url = reverse("sandbox:site_page", args=[n])
    query = request.META.get("QUERY_STRING", "")
    return f"{url}?{query}" if query else url


@require_GET
@api
def index(request):
    _site_params(request)  # a bad parameter is a 400 here too
    return render(request, "sandbox/site_index.html", {"start": _page_url(request, 0)})


@require_GET
@api
def page(request, n: int):
    pages, latency_ms, error_rate = _site_params(request)
    time.sleep(latency_ms / 1000)
    if n >= pages or site.is_broken(n):
        return render(request, "sandbox/site_error.html", {"n": n, "status": 404}, status=404)
    if site.is_flaky(n, error_rate) and services.page_hit(n) == 1:
        return render(request, "sandbox/site_error.html", {"n": n, "status": 503}, status=503)
    generation = selectors.current_generation()
    context = {
        "n": n,
        "generation": generation,
        "title": site.page_title(n, generation),
        "paragraphs": [" ".join(words) for words in site.page_paragraphs(n, generation)],
        "links": [(m, _page_url(request, m)) for m in site.page_links(n, pages, generation)],
    }
    return render(request, "sandbox/site_page.html", context)


@require_GET
@api
def generation(request):
    """The current generation and the pages changed since ``since`` (default 0)."""
    pages, _, _ = _site_params(request)
    current = selectors.current_generation()
    since = int_param(request, "since", 0, low=0, high=10**9)
    return JsonResponse(
        {
            "generation": current,
            "since": since,
            "pages": pages,
            "changed": site.changed_pages(pages, since, current),
        }
    )


@csrf_exempt  # an API for machines
@require_POST
@api
def generation_bump(request):
    """Bump the generation; answers with the pages whose text this bump changed."""
    pages, _, _ = _site_params(request)
    new = services.generation_bump()
    return JsonResponse(
        {"generation": new, "pages": pages, "changed": site.changed_pages(pages, new - 1, new)}
    )
