"""The generated site over HTTP."""

import re
from collections import Counter, deque
from html.parser import HTMLParser

import pytest

from sandbox import site

FAST = {"pages": 200, "latency_ms": 0}


class PageParser(HTMLParser):
    """Reads what a crawler reads: links, paragraph words, the generation."""

    def __init__(self):
        super().__init__()
        self.links, self.words, self.generation, self.title = [], [], None, ""
        self._in_p = self._in_title = False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "a":
            self.links.append(attrs["href"])
        elif tag == "meta" and attrs.get("name") == "generation":
            self.generation = int(attrs["content"])
        self._in_p = tag == "p" or self._in_p
        self._in_title = tag == "title"

    def handle_endtag(self, tag):
        if tag == "p":
            self._in_p = False
        self._in_title = False

    def handle_data(self, data):
        if self._in_p:
            self.words.extend(data.split())
        if self._in_title:
            self.title += data


def parse(html):
    parser = PageParser()
    parser.feed(html)
    return parser


def page_number(href):
    return int(re.search(r"/sandbox/site/page/(\d+)", href).group(1))


@pytest.mark.django_db
class TestPages:
    def test_a_page_shows_its_words_links_and_generation(self, client):
        response = client.get("/sandbox/site/page/5", FAST)
        assert response.status_code == 200
        page = parse(response.content.decode())
        assert page.words == site.page_words(5, 0)
        assert [page_number(h) for h in page.links] == site.page_links(5, 200)
        assert page.generation == 0
        assert page.title == site.page_title(5, 0)

    def test_links_keep_the_query_string(self, client):
        page = parse(client.get("/sandbox/site/page/0", FAST).content.decode())
        assert page.links[0] == "/sandbox/site/page/1?pages=200&latency_ms=0"

    def test_the_index_links_to_page_0(self, client):
        page = parse(client.get("/sandbox/site/", FAST).content.decode())
        assert page.links == ["/sandbox/site/page/0?pages=200&latency_ms=0"]

    def test_broken_pages_and_pages_past_the_end_are_404(self, client):
        assert client.get("/sandbox/site/page/13", FAST).status_code == 404
        assert client.get("/sandbox/site/page/200", FAST).status_code == 404
        assert client.get("/sandbox/site/page/199", FAST).status_code == 200

    def test_a_flaky_page_fails_its_first_request_only(self, client):
        n = next(n for n in range(200) if site.is_flaky(n, 0.5))
        params = {**FAST, "error_rate": 0.5}
        assert client.get(f"/sandbox/site/page/{n}", params).status_code == 503
        assert client.get(f"/sandbox/site/page/{n}", params).status_code == 200
        assert client.get(f"/sandbox/site/page/{n}", params).status_code == 200

    def test_bad_parameters_are_400(self, client):
        for params in ({"pages": "x"}, {"pages": 0}, {"latency_ms": -1}, {"error_rate": 2}):
            response = client.get("/sandbox/site/page/1", params)
            assert response.status_code == 400, params
            assert response.json()["error"] == "invalid_param"

    def test_latency_comes_from_the_environment(self, client, monkeypatch):
        monkeypatch.setenv("AGENTOPS_SANDBOX_LATENCY_MS", "0")
        monkeypatch.setenv("AGENTOPS_SANDBOX_PAGES", "20")
        assert client.get("/sandbox/site/page/19").status_code == 200
        assert client.get("/sandbox/site/page/20").status_code == 404


@pytest.mark.django_db
class TestGeneration:
    def test_a_bump_changes_only_the_listed_pages_and_only_their_text(self, client):
        before = {
            n: client.get(f"/sandbox/site/page/{n}", FAST).content.decode() for n in range(200)
        }
        bumped = client.post("/sandbox/site/generation/bump?pages=200").json()
        assert bumped["generation"] == 1
        listed = client.get("/sandbox/site/generation", {"pages": 200, "since": 0}).json()
        assert listed["generation"] == 1
        assert listed["changed"] == bumped["changed"] == site.changed_pages(200, 0, 1)
        assert listed["changed"], "a 200-page site should have a changed page in generation 1"
        for n in range(200):
            if site.is_broken(n):
                continue
            old = parse(before[n])
            new = parse(client.get(f"/sandbox/site/page/{n}", FAST).content.decode())
            assert new.generation == 1
            assert new.links == old.links
            assert (new.words != old.words) == (n in listed["changed"]), n

    def test_nothing_changed_since_the_current_generation(self, client):
        client.post("/sandbox/site/generation/bump")
        answer = client.get("/sandbox/site/generation", {"since": 1}).json()
        assert answer == {"generation": 1, "since": 1, "pages": 10_000, "changed": []}


@pytest.mark.django_db(transaction=True)
def test_a_crawl_over_http_finds_what_expected_crawl_says(http):
    """BFS over real HTTP on a 200-page site, with transient errors retried."""
    params = "pages=200&latency_ms=0&error_rate=0.05"
    start = parse(http.get(f"/site/?{params}").text).links[0]
    seen, queue = {start}, deque([start])
    ok, broken, terms, transient = set(), set(), Counter(), 0
    while queue:
        href = queue.popleft()
        response = http.get(href.removeprefix("/sandbox"))
        if response.status_code == 503:
            transient += 1
            response = http.get(href.removeprefix("/sandbox"))
        n = page_number(href)
        if response.status_code == 404:
            broken.add(n)
            continue
        assert response.status_code == 200
        ok.add(n)
        page = parse(response.text)
        terms.update(page.words)
        for link in page.links:
            if link not in seen:
                seen.add(link)
                queue.append(link)
    expected = site.expected_crawl(200)
    assert ok | broken == expected.reachable
    assert broken == expected.broken
    assert site.top_terms(terms) == expected.top_terms
    assert transient == sum(1 for n in expected.fetched_ok if site.is_flaky(n, 0.05)) > 0
