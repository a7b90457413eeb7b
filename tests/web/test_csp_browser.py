"""Every page under the Content-Security-Policy in Chromium, on a real Daphne: each URL
the project has (tests/fuzz/endpoints.py: every named pattern, the admin's too) is
loaded as a superuser who owns runs in every state, and the browser reports no CSP
violation (no inline script or style, no eval) and no script error."""

from __future__ import annotations

import pytest

from tests.fuzz.endpoints import every_url, make_world
from tests.web.conftest import log_in

pytestmark = [pytest.mark.browser, pytest.mark.services]

COLLECT_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`);
});
"""
# Pages that are not pages: JSON, downloads, POST-only endpoints, the session's end.
NOT_PAGES = ("/logout/", "/admin/logout/", "/admin/jsi18n/", "/admin/autocomplete/",
             "/admin/r/", "output.json", "/sandbox/api/", "/sandbox/llm/", "/rows/",
             "/sandbox/dataset/", "/sandbox/site/generation")


def test_every_page_loads_under_the_csp_without_a_violation(django_user_model, server,
                                                            browser_context):
    world = make_world(django_user_model)
    urls = [url for url in every_url(world) if not any(part in url for part in NOT_PAGES)]
    browser_context.add_init_script(COLLECT_VIOLATIONS)
    page = browser_context.new_page()
    console, errors = [], []
    page.on("console", lambda m: console.append(m.text) if m.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    log_in(page, server.url, "root", "root-pass-12345")
    violations = {}
    pages = 0
    for url in urls:
        head = page.request.get(f"{server.url}{url}", max_redirects=0)
        assert head.status < 500, url
        if head.status != 200 or "text/html" not in head.headers.get("content-type", ""):
            continue  # POST-only (405), a redirect, JSON: nothing for the browser to render
        policy = head.headers.get("content-security-policy", "")
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy, (url, policy)
        pages += 1
        page.goto(f"{server.url}{url}", wait_until="load")
        if page.locator("#live-indicator").count():  # live pages: wait for the socket
            page.wait_for_selector('#live-indicator[data-state="live"]')
        found = page.evaluate("window.__csp") + [
            text for text in console if "Content Security Policy" in text]
        if found:
            violations[url] = found
        console.clear()
    assert pages > 50, pages
    assert not violations, violations
    assert not errors, errors
