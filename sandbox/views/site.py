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


def request_params(request) -> tuple[int, int, float]:
    pages = int_param(request, "pages", 10_000, low=1, high=MAX_PAGES, env="AGENTOPS_SANDBOX_PAGES")
    latency_ms = int_param(
        request, "latency_ms", 20, low=0, high=MAX_LATENCY_MS, env="AGENTOPS_SANDBOX_LATENCY_MS"
    )
    error_rate = float_param(request, "error_rate", 0.0, low=0.0, high=1.0)
    return pages, latency_ms, error_rate


def _query(request) -> str:
    return request.META.get("QUERY_STRING", "")


def page_url(n: int, query: str) -> str:
    # Links carry the request's own query string, so a crawl started with
    # ?pages=200&latency_ms=0 stays on that site.
    url = reverse("sandbox:site_page", args=[n])
    return f"{url}?{query}" if query else url


def page_answer(n: int, pages: int, error_rate: float, query: str, *,
                generation, hit) -> tuple[str, dict, int]:
    """What page `n` is, after its latency: (template, context, status). The rule for this
    view and for the benchmarks' stand-in site (bench/site_server.py); `generation()`
    reads the site's generation, `hit(n)` counts a request of a flaky page."""
    if n >= pages or site.is_broken(n):
        return "sandbox/site_error.html", {"n": n, "status": 404}, 404
    if site.is_flaky(n, error_rate) and hit(n) == 1:
        return "sandbox/site_error.html", {"n": n, "status": 503}, 503
    current = generation()
    return "sandbox/site_page.html", {
        "n": n,
        "generation": current,
        "title": site.page_title(n, current),
        "paragraphs": [" ".join(words) for words in site.page_paragraphs(n, current)],
        "links": [(m, page_url(m, query)) for m in site.page_links(n, pages, current)],
    }, 200


def generation_answer(pages: int, since: int, current: int) -> dict:
    return {"generation": current, "since": since, "pages": pages,
            "changed": site.changed_pages(pages, since, current)}


@require_GET
@api
def index(request):
    request_params(request)  # a bad parameter is a 400 here too
    return render(request, "sandbox/site_index.html", {"start": page_url(0, _query(request))})


@require_GET
@api
def page(request, n: int):
    pages, latency_ms, error_rate = request_params(request)
    time.sleep(latency_ms / 1000)
    template, context, status = page_answer(
        n, pages, error_rate, _query(request),
        generation=selectors.current_generation, hit=services.page_hit)
    return render(request, template, context, status=status)


@require_GET
@api
def generation(request):
    """The current generation and the pages changed since ``since`` (default 0)."""
    pages, _, _ = request_params(request)
    since = int_param(request, "since", 0, low=0, high=10**9)
    return JsonResponse(generation_answer(pages, since, selectors.current_generation()))


@csrf_exempt  # an API for machines
@require_POST
@api
def generation_bump(request):
    """Bump the generation; answers with the pages whose text this bump changed."""
    pages, _, _ = request_params(request)
    new = services.generation_bump()
    return JsonResponse(
        {"generation": new, "pages": pages, "changed": site.changed_pages(pages, new - 1, new)}
    )
