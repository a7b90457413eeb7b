"""The generated site the crawler walks: pure, deterministic, no Django.

Everything here is a function of (page number, page count, generation), so the
tests and the crawler's report checks can compute offline what a crawl over
HTTP must find (``expected_crawl``).

- Links never change with the generation. Page ``n`` always links to its tree
  children ``2n+1`` and ``2n+2`` (when < pages), and to the children of a child
  that is broken, so every page is reachable from page 0 even though broken
  pages answer 404 and show no links. Random extra links bring the total to 3-8.
- Text: words drawn from ``VOCABULARY`` with Zipf-like weights, seeded by the
  page and its *content version*. Each generation bump changes the version of
  a deterministic ~1% of pages (``changed_in``), so only their text changes.
- Terms are the words of the page's ``<p>`` paragraphs (``page_words``), not the
  title and not the link texts.
"""

import hashlib
import random
from collections import Counter, deque
from dataclasses import dataclass, field

BROKEN_MODULUS = 997
BROKEN_REMAINDER = 13
CHANGE_PER_MILLE = 10  # a bump changes the text of ~1% of the pages
MIN_LINKS, MAX_LINKS = 3, 8
TOP_TERMS = 20

# ~330 distinct lower-case words; none is a number, "page" or "link".
_VOCABULARY_TEXT = """
    able acid aged also area army away baby back ball band bank base bath bear
    beat been beer bell belt best bill bird blow blue boat body bomb bond bone
    book boom born boss both bowl bulk burn bush busy cake call calm came camp
    card care case cash cast cell chat chip city club coal coat code cold come
    cook cool cope copy core cost crew crop dark data date dawn days dead deal
    dean dear debt deep deny desk dial diet disc disk does done door dose down
    draw drew drop drug dual duke dust duty each earn ease east easy edge else
    even ever evil exit face fact fail fair fall farm fast fate fear feed feel
    feet fell felt file fill film find fine fire firm fish five flat flow food
    foot ford form fort four free from fuel full fund gain game gate gave gear
    gene gift girl give glad goal goes gold golf gone good gray grew grey grow
    gulf hair half hall hand hang hard harm hate have head hear heat held hell
    help here hero high hill hire hold hole holy home hope host hour huge hung
    hunt hurt idea inch into iron item jack jane jean john join jump jury just
    keen keep kent kept kick kill kind king knee knew know lack lady laid lake
    land lane last late lead left less life lift like line list live load
    loan lock logo long look lord lose loss lost love luck made mail main make
    male many mark mass matt meal mean meat meet menu mere mike mile milk mill
    mind mine miss mode mood moon more most move much must name navy near neck
    need news next nice nick nine none nose note okay once only onto open oral
    over pace pack paid pain pair palm park part pass past path peak pick pink
    pipe plan play plot plug plus poll pool poor port post pull pure push race
"""
VOCABULARY = tuple(_VOCABULARY_TEXT.split())
assert len(VOCABULARY) == len(set(VOCABULARY)) >= 300


def _zipf_weights() -> tuple[float, ...]:
    # Zipf-like weights make the top terms clear winners, as in real text; the
    # ranks are shuffled (with a fixed seed) so they do not follow the word list.
    ranks = list(range(1, len(VOCABULARY) + 1))
    random.Random("zipf-ranks").shuffle(ranks)
    return tuple(1.0 / rank for rank in ranks)


_WEIGHTS = _zipf_weights()


def _rng(*parts) -> random.Random:
    # A str seed is hashed with SHA-512 by random.seed: the same in every process,
    # unlike hash(), which PYTHONHASHSEED randomises.
    return random.Random(":".join(str(part) for part in parts))


def _fraction(*parts) -> float:
    """A stable pseudo-random number in [0, 1) for the given parts."""
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def is_broken(n: int) -> bool:
    """Permanently broken pages: they always answer 404."""
    return n % BROKEN_MODULUS == BROKEN_REMAINDER


def is_flaky(n: int, error_rate: float) -> bool:
    """Pages that answer 503 to their first request (about error_rate of them)."""
    return error_rate > 0 and not is_broken(n) and _fraction("flaky", n) < error_rate


def changed_in(n: int, generation: int) -> bool:
    """Whether the bump to ``generation`` (>= 1) changed the text of page ``n``."""
    return generation >= 1 and _fraction("changed", generation, n) * 1000 < CHANGE_PER_MILLE


def content_version(n: int, generation: int) -> int:
    """How many bumps up to ``generation`` changed page ``n``'s text."""
    return sum(1 for g in range(1, generation + 1) if changed_in(n, g))


def changed_pages(pages: int, since: int, generation: int) -> list[int]:
    """Pages whose text changed in a generation in (since, generation]."""
    bumps = range(max(since, 0) + 1, generation + 1)
    return [n for n in range(pages) if any(changed_in(n, g) for g in bumps)]


def page_links(n: int, pages: int, generation: int = 0) -> list[int]:
    """The pages that page ``n`` links to, in page order; independent of generation."""
    del generation  # links are the same in every generation, by design
    links = set()
    for child in (2 * n + 1, 2 * n + 2):
        if child < pages:
            links.add(child)
            if is_broken(child):
                # A broken page shows no links, so adopt its children: this keeps
                # every page reachable (a broken page's parent is never broken).
                links.update(c for c in (2 * child + 1, 2 * child + 2) if c < pages)
    rng = _rng("links", n, pages)
    target = min(rng.randint(MIN_LINKS, MAX_LINKS), pages - 1)
    attempts = 0
    while len(links) < target and attempts < 64:
        attempts += 1
        candidate = rng.randrange(pages)
        if candidate != n:
            links.add(candidate)
    return sorted(links)


def page_words(n: int, generation: int = 0) -> list[str]:
    """The words of page ``n``'s paragraphs, in order."""
    return [word for paragraph in page_paragraphs(n, generation) for word in paragraph]


def page_paragraphs(n: int, generation: int = 0) -> list[list[str]]:
    """Page ``n``'s text as 2-5 paragraphs of 12-40 words each."""
    rng = _rng("text", n, content_version(n, generation))
    return [
        rng.choices(VOCABULARY, weights=_WEIGHTS, k=rng.randint(12, 40))
        for _ in range(rng.randint(2, 5))
    ]


def page_title(n: int, generation: int = 0) -> str:
    """A title: the page number and two of its own words."""
    words = page_words(n, generation)
    return f"Page {n}: {words[0].capitalize()} {words[-1]}"


@dataclass
class ExpectedCrawl:
    """What a complete crawl from page 0 must find."""

    reachable: set[int] = field(default_factory=set)
    broken: set[int] = field(default_factory=set)
    top_terms: list[tuple[str, int]] = field(default_factory=list)
    term_counts: Counter = field(default_factory=Counter)

    @property
    def fetched_ok(self) -> set[int]:
        return self.reachable - self.broken


def expected_crawl(pages: int, generation: int = 0) -> ExpectedCrawl:
    """BFS from page 0 over ``page_links``: the pages found, the broken ones,
    and the term counts over the reachable non-broken pages.

    ``top_terms`` is the TOP_TERMS most frequent words, ties broken by the word.
    """
    result = ExpectedCrawl()
    queue = deque([0])
    result.reachable.add(0)
    while queue:
        n = queue.popleft()
        if is_broken(n):
            result.broken.add(n)
            continue  # a 404 page has no links to follow
        result.term_counts.update(page_words(n, generation))
        for link in page_links(n, pages, generation):
            if link not in result.reachable:
                result.reachable.add(link)
                queue.append(link)
    result.top_terms = top_terms(result.term_counts)
    return result


def top_terms(counts: Counter, k: int = TOP_TERMS) -> list[tuple[str, int]]:
    """The k most frequent terms, highest count first, ties by alphabetical order."""
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:k]
