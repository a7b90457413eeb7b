"""The crawl agent's tools and bookkeeping.

Tools (effects, logged and replayed by the engine):
  fetch_page(url)               one page: its terms, links and generation
  site_generation(site, pages)  the site's generation stamp and the pages changed since one

Bookkeeping (pure, no I/O): ``CrawlState`` wraps the agent's state dict. The state
keeps page *numbers*, not URLs, to stay small: a 10,000-page crawl's state is
~1 MB compressed, most of it the per-page index that lets a changed page's old
terms be taken out of the totals when it is fetched again.
"""

from __future__ import annotations

import re
from collections import Counter
from html.parser import HTMLParser
from urllib.parse import urlencode, urljoin, urlsplit

from runs.durable import tool

from .http import HTTP_RETRY, request

TOP_TERMS = 20
MOST_LINKED = 10
WORD = re.compile(r"[a-z0-9']+")
PAGE_PATH = re.compile(r"/page/(\d+)$")



# --- the site's URLs ----------------------------------------------------------------------
def site_params(pages: int, latency_ms: int, error_rate: float) -> dict:
    return {"pages": pages, "latency_ms": latency_ms, "error_rate": error_rate}


def page_url(site: str, n: int, params: dict) -> str:
    return f"{site}/page/{n}?{urlencode(params)}"


def page_number(url: str) -> int | None:
    match = PAGE_PATH.search(urlsplit(url).path)
    return int(match.group(1)) if match else None


# --- parsing -----------------------------------------------------------------------------
class PageParser(HTMLParser):
    """Collects the <title>, the generation <meta>, <p> text and <nav> links."""

    def __init__(self):
        super().__init__()
        self.title, self.generation = "", 0
        self.paragraphs: list[str] = []
        self.hrefs: list[str] = []
        self._in: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "meta" and attrs.get("name") == "generation":
            self.generation = int(attrs.get("content") or 0)
        elif tag == "a" and "nav" in self._in and attrs.get("href"):
            self.hrefs.append(attrs["href"])
        elif tag == "p":
            self.paragraphs.append("")
        if tag in ("title", "p", "nav"):
            self._in.append(tag)

    def handle_endtag(self, tag):
        if self._in and self._in[-1] == tag:
            self._in.pop()

    def handle_data(self, data):
        if not self._in:
            return
        if self._in[-1] == "p":
            self.paragraphs[-1] += data
        elif self._in[-1] == "title":
            self.title += data


def parse_page(url: str, html: str) -> dict:
    """A fetched page as the crawl keeps it: terms of its paragraphs, linked page numbers."""
    parser = PageParser()
    parser.feed(html)
    terms = Counter(word for p in parser.paragraphs for word in WORD.findall(p.lower()))
    links = {page_number(urljoin(url, href)) for href in parser.hrefs}
    links.discard(None)
    return {"page": page_number(url), "title": parser.title.strip(),
            "generation": parser.generation, "terms": dict(sorted(terms.items())),
            "links": sorted(links)}


# --- tools ------------------------------------------------------------------------------------
@tool(idempotent=True, retry=HTTP_RETRY)
def fetch_page(url: str, *, idempotency_key: str) -> dict:
    """GET one page of the site (a read: safe to repeat, so idempotent).

    A 503 (a flaky page fails its first request) is retried by the engine's retry
    policy; a 404 raises PermanentHTTPError and the crawl notes a failure at once.
    """
    response = request("GET", url, idempotency_key=idempotency_key)
    return parse_page(url, response.text)


@tool(idempotent=True, retry=HTTP_RETRY)
def site_generation(site: str, pages: int, since: int, *, idempotency_key: str) -> dict:
    """The site's generation now, and the pages whose text changed after ``since``."""
    response = request("GET", f"{site}/generation", params={"pages": pages, "since": since},
                       idempotency_key=idempotency_key)
    body = response.json()
    return {"generation": body["generation"], "changed": body["changed"]}


# --- bookkeeping ------------------------------------------------------------------------------
def new_crawl(site: str, params: dict, start: int = 0) -> dict:
    """The first state: page 0 queued, nothing fetched."""
    return {
        "site": site,
        "params": params,
        "generation": None,  # the site's generation stamp, taken by the first step
        "drift": None,       # changes on_resume found, applied by the next live step
        "frontier": [start],  # BFS queue of page numbers
        "seen": [start],      # every page discovered (queued, fetched or failed), sorted
        "index": {},          # page -> [terms "word:count ...", [linked pages]]
        "terms": {},          # running term totals over the index
        "edges": 0,
        "failures": {},       # page -> error
        "fetches": 0,
        "refetched": 0,
    }


def encode_terms(terms: dict) -> str:
    return " ".join(f"{word}:{count}" for word, count in terms.items())


def decode_terms(text: str) -> dict:
    return {word: int(count) for word, count in (p.split(":") for p in text.split())}


class CrawlState:
    """The state dict with a set of seen pages, for the length of one step."""

    def __init__(self, state: dict):
        self.state = state
        self.seen = set(state["seen"])

    @property
    def frontier(self) -> list[int]:
        return self.state["frontier"]

    def url(self, n: int) -> str:
        return page_url(self.state["site"], n, self.state["params"])

    def take(self, k: int) -> list[int]:
        batch = self.frontier[:k]
        del self.frontier[:k]
        return batch

    def add_page(self, page: dict) -> None:
        """Index a fetched page and queue the pages it links to that are new."""
        s, key = self.state, str(page["page"])
        s["fetches"] += 1
        if key in s["index"]:  # fetched again after it changed: take its old terms out
            old_terms, old_links = s["index"][key]
            self._count(decode_terms(old_terms), -1)
            s["edges"] -= len(old_links)
        s["index"][key] = [encode_terms(page["terms"]), page["links"]]
        self._count(page["terms"], +1)
        s["edges"] += len(page["links"])
        for link in page["links"]:
            if link not in self.seen:
                self.seen.add(link)
                self.frontier.append(link)

    def add_failure(self, n: int, error: str) -> None:
        self.state["fetches"] += 1
        self.state["failures"][str(n)] = error

    def requeue_changed(self, generation: int, changed: list[int]) -> list[int]:
        """Queue the fetched pages among ``changed`` again; the stamp moves to ``generation``."""
        queued = set(self.frontier)
        again = [n for n in changed if str(n) in self.state["index"] and n not in queued]
        self.frontier.extend(again)
        self.state["refetched"] += len(again)
        self.state["generation"] = generation
        return again

    def dump(self) -> dict:
        self.state["seen"] = sorted(self.seen)
        return self.state

    # --- numbers ------------------------------------------------------------------------------
    @property
    def fetched(self) -> int:
        return len(self.state["index"]) + len(self.state["failures"])

    def summary(self) -> str:
        top = top_terms(self.state["terms"], 3)
        words = ", ".join(f"{w} ({c})" for w, c in top)
        return (f"{len(self.state['index'])} pages, {len(self.state['failures'])} failed, "
                f"{len(self.frontier)} queued; top terms: {words or '-'}")

    def report(self) -> dict:
        s = self.state
        inlinks = Counter(link for _, links in s["index"].values() for link in links)
        most_linked = sorted(inlinks.items(), key=lambda item: (-item[1], item[0]))[:MOST_LINKED]
        return {
            "site": s["site"],
            "generation": s["generation"],
            "pages": {"discovered": len(self.seen), "fetched": len(s["index"]),
                      "failed": len(s["failures"])},
            "fetches": s["fetches"],
            "refetched": s["refetched"],
            "terms": {"distinct": len(s["terms"]), "total": sum(s["terms"].values())},
            "top_terms": [[w, c] for w, c in top_terms(s["terms"], TOP_TERMS)],
            "link_graph": {"pages": len(s["index"]), "edges": s["edges"],
                           "most_linked": [[n, c] for n, c in most_linked]},
            "failures": [{"page": int(n), "error": e}
                         for n, e in sorted(s["failures"].items(), key=lambda i: int(i[0]))],
        }

    def _count(self, terms: dict, sign: int) -> None:
        totals = self.state["terms"]
        for word, count in terms.items():
            totals[word] = totals.get(word, 0) + sign * count
            if not totals[word]:
                del totals[word]


def top_terms(counts: dict, k: int) -> list[tuple[str, int]]:
    """The k most frequent terms, ties broken alphabetically."""
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:k]
