"""What there is to fuzz, found from the project itself: every named URL pattern made
concrete, and every form and query parameter its pages offer.

A new URL pattern is fuzzed without a change here, unless it takes a URL argument
nobody knows how to fill: then `concrete_urls` fails and says which.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
from urllib.parse import parse_qsl, urljoin, urlsplit

from django.contrib.auth.models import Group
from django.urls import URLResolver, get_resolver, reverse

from runs import services
from runs.durable import registry
from runs.models import Checkpoint


def named_patterns(patterns=None, namespace=None):
    """(namespace, name, [URL argument names]) of every named URL pattern."""
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(pattern, URLResolver):
            yield from named_patterns(pattern.url_patterns, pattern.namespace or namespace)
        elif pattern.name:
            yield namespace, pattern.name, list(pattern.pattern.regex.groupindex)


def concrete_urls(arguments: dict) -> list[str]:
    """One URL per named pattern; `arguments` maps an argument name to its value, or to
    a function of the pattern's name giving it."""
    urls, unknown = [], set()
    for namespace, name, args in named_patterns():
        if any(arg not in arguments for arg in args):
            unknown.update(arg for arg in args if arg not in arguments)
            continue
        values = {arg: arguments[arg](name) if callable(arguments[arg]) else arguments[arg]
                  for arg in args}
        urls.append(reverse(f"{namespace}:{name}" if namespace else name, kwargs=values))
    assert not unknown, f"the fuzz test cannot fill the URL arguments {sorted(unknown)}"
    return sorted(set(urls))


@dataclass
class Form:
    action: str
    method: str
    fields: dict[str, str] = field(default_factory=dict)   # name -> the value it would send
    json_fields: set[str] = field(default_factory=set)      # marked data-json
    names: set[str] = field(default_factory=set)            # every named control
    checkboxes: set[str] = field(default_factory=set)       # their value is only "on"/"off"


class _PageParser(HTMLParser):
    def __init__(self, url: str):
        super().__init__(convert_charrefs=True)
        self.url = url
        self.forms: list[Form] = []
        self.query_names: set[str] = set()
        self._form: Form | None = None
        self._textarea: str | None = None
        self._select: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for link in (attrs.get(a) or "" for a in ("href", "hx-get", "data-url")):
            if "?" in link:
                self.query_names.update(k for k, _ in parse_qsl(urlsplit(link).query,
                                                                keep_blank_values=True))
        if tag == "form":
            action = urljoin(self.url, attrs.get("action") or self.url)
            self._form = Form(action=action, method=(attrs.get("method") or "get").lower())
            self.forms.append(self._form)
        name = attrs.get("name")
        if self._form is None or not name or tag not in {"input", "textarea", "select",
                                                          "option", "button"}:
            if tag == "option" and self._select and self._form is not None:
                self._option(attrs)
            return
        if tag != "option":
            self._form.names.add(name)
        if "data-json" in attrs:
            self._form.json_fields.add(name)
        kind = (attrs.get("type") or "text").lower()
        if tag == "input" and kind == "checkbox":
            self._form.checkboxes.add(name)
        if tag == "textarea":
            self._textarea = name
            self._form.fields[name] = ""
        elif tag == "select":
            self._select = name
        elif tag == "input" and kind not in {"checkbox", "radio", "submit", "button"}:
            self._form.fields[name] = attrs.get("value") or ""
        elif tag == "input" and "checked" in attrs:
            self._form.fields[name] = attrs.get("value") or "on"

    def _option(self, attrs):
        if "selected" in attrs or self._select not in self._form.fields:
            self._form.fields[self._select] = attrs.get("value") or ""

    def handle_data(self, data):
        if self._textarea and self._form is not None:
            self._form.fields[self._textarea] += data

    def handle_endtag(self, tag):
        if tag == "textarea":
            self._textarea = None
        elif tag == "select":
            self._select = None
        elif tag == "form":
            self._form = None


def page_inputs(url: str, html: str) -> tuple[list[Form], set[str]]:
    """The forms of a page and the query parameter names its links use."""
    parser = _PageParser(url)
    parser.feed(html)
    return parser.forms, parser.query_names


def make_world(django_user_model) -> dict:
    """A superuser and runs in every state that shows a form: waiting for input
    (the answer form), needing attention (the resolve form), with checkpoints."""
    from tests.operator import agents
    from tests.operator.conftest import in_doubt_run
    from tests.web.conftest import drive

    agents.reset()
    root = django_user_model.objects.create_superuser("root", password="root-pass-12345")
    waiting = drive(services.run_launch(user=root, agent="ask", inputs={}).pk)
    in_doubt = in_doubt_run(root)
    from runs.schedules.services import schedule_create
    from runs.webhooks.services import subscription_create

    schedule = schedule_create(user=root, data={"name": "s", "agent": "ask", "inputs": {},
                                                "kind": "cron", "cron": "0 3 * * *"})
    subscription = subscription_create(user=root, data={"url": "https://hooks.example.com/x",
                                                        "events": ["run.ended"]})
    return {"root": root, "waiting": waiting, "in_doubt": in_doubt, "schedule": schedule,
            "subscription": subscription}


def every_url(world) -> list[str]:
    run = world["in_doubt"]
    checkpoint = Checkpoint.objects.filter(run=run).order_by("number").first()
    later = Checkpoint.objects.filter(run=run).order_by("number")[1]  # its page shows a diff
    objects = {"auth_user": world["root"].pk, "auth_group": Group.objects.first().pk,
               "runs_run": run.pk, "runs_checkpoint": later.pk}

    def object_id(name):
        for prefix, pk in objects.items():
            if name.startswith(prefix):
                return pk
        return 1  # an object that may not exist: a 302 or 404, never a 500

    # The API's event stream is an endless response under a live run, served by Daphne:
    # tests/api/test_fuzz.py fuzzes it (on ended runs) and tests/api/test_client_live.py
    # follows it.
    return [url for url in concrete_urls({
        "run_id": run.pk, "number": checkpoint.number, "agent": "ask", "n": 1,
        "app_label": "runs", "object_id": object_id, "id": world["root"].pk,
        "content_type_id": 1, "schedule_id": world["schedule"].pk,
        "subscription_id": world["subscription"].pk,
        "approval_id": "0" * 32,  # no such request: a 404 (runs/budgets/urls.py)
        "name": "ask", "seq": 1,  # the API's agent and in-doubt effect (runs/api/)
        "token_id": 1,  # maybe nobody's token: a 404 (runs/api/urls.py)
    }) if not url.endswith("/events/stream")] + [f"/runs/{world['waiting'].pk}/"] + [
        f"/launch/{name}/" for name in registry.names()]
