"""The built-in agents' tools and bookkeeping, without the engine."""

from collections import Counter

import httpx
import pytest

from builtin_agents.tools import crawl, dataset
from builtin_agents.tools.http import TransientHTTPError, check
from builtin_agents.tools.research import CalculatorError, evaluate
from runs.durable import PermanentToolError
from sandbox import site


@pytest.mark.parametrize("expression,value", [
    ("49 * 2", 98), ("7 / 2", 3.5), ("2 ** 10", 1024), ("-(3 - 5) % 3", 2), ("9 // 2", 4),
    ("1.5 + 1.5", 3),
])
def test_calculator_does_arithmetic(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize("expression", [
    "__import__('os').system('true')", "x + 1", "len([1])", "(1).real", "[1, 2]", "1 / 0",
    "2 ** 100000", "9 ** 9 ** 9", "(-8) ** 0.5", "1e308 * 10", "True + 1", "1 +", "(" * 300,
])
def test_calculator_refuses_everything_else(expression):
    with pytest.raises(CalculatorError):
        evaluate(expression)


def render_page(n: int, pages: int, generation: int = 0) -> str:
    from django.template.loader import render_to_string

    return render_to_string("sandbox/site_page.html", {
        "n": n, "generation": generation, "title": site.page_title(n, generation),
        "paragraphs": [" ".join(p) for p in site.page_paragraphs(n, generation)],
        "links": [(m, f"/sandbox/site/page/{m}?pages={pages}") for m in site.page_links(n, pages)],
    })


def test_a_parsed_page_has_the_paragraph_terms_and_the_nav_links():
    url = "http://testserver/sandbox/site/page/7?pages=300"
    page = crawl.parse_page(url, render_page(7, 300, generation=2))
    assert page["page"] == 7 and page["generation"] == 2
    assert page["title"] == site.page_title(7, 2)
    assert page["terms"] == dict(sorted(Counter(site.page_words(7, 2)).items()))
    assert page["links"] == site.page_links(7, 300)


def test_a_page_fetched_again_replaces_its_old_terms_and_links():
    state = crawl.CrawlState(crawl.new_crawl("http://s/site", {"pages": 10}))
    assert state.take(25) == [0]
    state.add_page({"page": 0, "terms": {"able": 2, "acid": 1}, "links": [1, 2]})
    state.requeue_changed(1, [0, 5])  # 5 was never fetched: nothing to do for it
    assert state.take(5) == [1, 2, 0]
    state.add_page({"page": 0, "terms": {"able": 1, "band": 4}, "links": [1, 2]})
    report = state.report()
    assert state.state["terms"] == {"able": 1, "band": 4}
    assert report["link_graph"]["edges"] == 2 and report["fetches"] == 2
    assert report["pages"] == {"discovered": 3, "fetched": 1, "failed": 0}
    assert report["refetched"] == 1 and report["generation"] == 1


def test_checksums_of_batches_add_up_to_the_checksum_of_all_rows():
    rows = [dataset.transform(r) for r in site_rows(250)]
    total = dataset.ZERO
    for start in range(0, 250, 100):
        total = dataset.add_checksums(total, dataset.checksum(rows[start:start + 100]))
    assert total == dataset.checksum(rows)


def site_rows(n):
    from sandbox.dataset import source_rows

    return source_rows(0, n, total=n)


@pytest.mark.parametrize("status,error", [
    (503, TransientHTTPError), (409, TransientHTTPError), (429, TransientHTTPError),
    (404, PermanentToolError), (422, PermanentToolError), (400, PermanentToolError),
])
def test_http_errors_are_transient_or_permanent(status, error):
    response = httpx.Response(status, json={"error": "x", "detail": "why"},
                              request=httpx.Request("GET", "http://s/x"))
    with pytest.raises(error, match="why"):
        check(response)
