"""The browser fixtures of the user pages' tests."""

from tests.web.conftest import browser, browser_context  # noqa: F401
