"""sandbox.site: the generated site, offline."""

from collections import Counter, deque

from sandbox import site


def test_pages_are_deterministic():
    assert site.page_words(42, 0) == site.page_words(42, 0)
    assert site.page_links(42, 10_000) == site.page_links(42, 10_000)
    assert site.page_words(42, 0) != site.page_words(43, 0)


def test_words_come_from_the_vocabulary():
    words = site.page_words(7)
    assert words and set(words) <= set(site.VOCABULARY)
    assert len(site.VOCABULARY) >= 300


def test_every_page_has_3_to_8_links_to_other_pages():
    for n in range(0, 10_000, 37):
        links = site.page_links(n, 10_000)
        assert 3 <= len(links) <= 8
        assert n not in links
        assert all(0 <= m < 10_000 for m in links)
        assert {m for m in (2 * n + 1, 2 * n + 2) if m < 10_000} <= set(links)


def test_links_do_not_depend_on_the_generation():
    assert site.page_links(5, 500, generation=0) == site.page_links(5, 500, generation=9)


def test_broken_pages():
    assert site.is_broken(13) and site.is_broken(1010)
    assert not site.is_broken(0) and not site.is_broken(14)


def test_every_page_is_reachable_although_broken_pages_show_no_links():
    crawl = site.expected_crawl(3000)
    assert crawl.reachable == set(range(3000))
    assert crawl.broken == {13, 1010, 2007}
    assert crawl.fetched_ok == set(range(3000)) - crawl.broken


def test_expected_crawl_counts_terms_of_reachable_non_broken_pages():
    crawl = site.expected_crawl(50)
    counts = Counter()
    for n in crawl.fetched_ok:
        counts.update(site.page_words(n))
    assert crawl.term_counts == counts
    assert len(crawl.top_terms) == 20
    assert crawl.top_terms == sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:20]


def test_tiny_sites():
    assert site.expected_crawl(1).reachable == {0}
    assert site.page_links(0, 2) == [1]


def test_a_bump_changes_the_text_of_about_one_percent_of_the_pages():
    changed = site.changed_pages(10_000, since=0, generation=1)
    assert 50 <= len(changed) <= 150
    for n in range(300):
        same = site.page_words(n, 0) == site.page_words(n, 1)
        assert same == (n not in changed)


def test_changed_since_accumulates_bumps():
    first = set(site.changed_pages(2000, 0, 1))
    second = set(site.changed_pages(2000, 1, 2))
    assert set(site.changed_pages(2000, 0, 2)) == first | second
    assert site.changed_pages(2000, 2, 2) == []


def test_flaky_pages_follow_the_error_rate():
    flaky = [n for n in range(10_000) if site.is_flaky(n, 0.05)]
    assert 350 <= len(flaky) <= 650
    assert not any(site.is_flaky(n, 0.0) for n in range(1000))
    assert not any(site.is_broken(n) for n in flaky)


def test_bfs_over_page_links_agrees_with_expected_crawl():
    seen, queue = {0}, deque([0])
    while queue:
        n = queue.popleft()
        if site.is_broken(n):
            continue
        for m in site.page_links(n, 400):
            if m not in seen:
                seen.add(m)
                queue.append(m)
    assert seen == site.expected_crawl(400).reachable
