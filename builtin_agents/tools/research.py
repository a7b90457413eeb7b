"""The assistant's tools: search the site's pages, a calculator, notes.

``search_pages`` searches the sandbox site's text live: it fetches the first
``scan`` pages (the same pages the crawl agent walks, parsed the same way) and
ranks them by how often the query's words occur in their paragraphs. Searching a
finished crawl's index instead would tie the assistant to a crawl run; scanning
keeps it self-contained and still real work over HTTP.

``calculator`` evaluates arithmetic with the ``ast`` module: numbers, + - * / //
% ** and parentheses, nothing else (no names, calls or attributes), so a model
cannot make it run code.

``write_note`` stores a note through the idempotent records API.
"""

from __future__ import annotations

import ast
import operator
from concurrent.futures import ThreadPoolExecutor

from runs.durable import PermanentToolError, tool

from .crawl import WORD, page_url, parse_page
from .http import HTTP_RETRY, PermanentHTTPError, request
from .llm import function_spec

SEARCH_THREADS = 8
MAX_HITS = 5

SPECS = [
    function_spec("search_pages", "Search the crawled site's pages for words; returns the "
                  "best matching pages and how many pages matched.",
                  {"query": {"type": "string", "description": "words to look for"}}),
    function_spec("calculator", "Evaluate an arithmetic expression (+ - * / // % ** and "
                  "parentheses).", {"expression": {"type": "string"}}),
    function_spec("write_note", "Save a note for the user; returns its id.",
                  {"title": {"type": "string"}, "body": {"type": "string"}}),
]


# --- search ------------------------------------------------------------------------------------
@tool(idempotent=True, retry=HTTP_RETRY)
def search_pages(site: str, params: dict, scan: int, query: str, *,
                 idempotency_key: str) -> dict:
    """Rank pages 0 .. scan-1 by the occurrences of the query's words."""
    words = set(WORD.findall(query.lower()))
    urls = [page_url(site, n, params) for n in range(scan)]
    with ThreadPoolExecutor(SEARCH_THREADS) as pool:
        pages = [page for page in pool.map(_fetch_or_none, urls) if page is not None]
    hits = []
    for page in pages:
        score = sum(page["terms"].get(word, 0) for word in words)
        if score:
            hits.append({"page": page["page"], "title": page["title"], "score": score,
                         "url": page_url(site, page["page"], params)})
    hits.sort(key=lambda hit: (-hit["score"], hit["page"]))
    return {"query": query, "scanned": len(pages), "count": len(hits), "hits": hits[:MAX_HITS]}


def _fetch_or_none(url: str) -> dict | None:
    try:
        return parse_page(url, request("GET", url).text)
    except PermanentHTTPError as error:
        if error.status == 404:  # a broken page has nothing to find
            return None
        raise


# --- calculator -------------------------------------------------------------------------------
_OPERATORS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos,
}
MAX_EXPRESSION = 500
MAX_EXPONENT = 1000
MAX_MAGNITUDE = 10 ** 100


class CalculatorError(PermanentToolError, ValueError):
    """The same expression fails the same way: not retried."""


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic expression, or CalculatorError."""
    if len(expression) > MAX_EXPRESSION:
        raise CalculatorError(f"expression longer than {MAX_EXPRESSION} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, RecursionError, MemoryError):
        raise CalculatorError(f"not an arithmetic expression: {expression!r}") from None
    try:
        value = _eval(tree.body)
    except (ZeroDivisionError, OverflowError, RecursionError) as exc:
        raise CalculatorError(f"{expression!r}: {type(exc).__name__}: {exc}") from None
    if isinstance(value, complex):  # (-8) ** 0.5
        raise CalculatorError(f"{expression!r} has no real value")
    if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
        value = int(value)
    return value


def _eval(node):
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculatorError(f"exponent {right} is too large")
        value = _OPERATORS[type(node.op)](left, right)
        if abs(value) > MAX_MAGNITUDE:
            raise CalculatorError("the result is too large")
        return value
    raise CalculatorError(f"not allowed in an expression: {ast.dump(node)[:80]}")


@tool(idempotent=True)
def calculator(expression: str, *, idempotency_key: str) -> dict:
    """Pure arithmetic: idempotent by nature (the key is not needed)."""
    return {"expression": expression, "result": evaluate(expression)}


# --- notes ------------------------------------------------------------------------------------
@tool(idempotent=True, retry=HTTP_RETRY)
def write_note(target: str, unit: str, title: str, body: str, *, idempotency_key: str) -> dict:
    """Store a note as a record; a repeat with the same key returns the same note."""
    response = request("POST", f"{target}/records", idempotency_key=idempotency_key,
                       json={"unit": unit, "kind": "note", "title": title, "body": body})
    stored = response.json()
    return {"id": stored["id"], "title": title}
