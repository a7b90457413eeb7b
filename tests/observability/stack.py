"""A live stack for the observability tests: Daphne and a worker tree sharing one
PROMETHEUS_MULTIPROC_DIR, both exporting traces to an in-test OTLP collector; and
the clients a test talks to it with (a logged-in browser's HTTP session, /metrics)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

TOKEN = "test-scrape-token"
AGENT_MODULES = "tests.workload_agents,tests.observability.traced_agent"


def stack_env(tmp_path, collector) -> dict:
    return {
        "PROMETHEUS_MULTIPROC_DIR": tmp_path / "metrics",
        "AGENTOPS_METRICS_TOKEN": TOKEN,
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # spans leave a worker within 50 ms of ending
        "AGENTOPS_AGENT_MODULES": AGENT_MODULES,
        "AGENTOPS_LOG_FORMAT": "json",
    }


def logged_in(base_url: str, username: str, password: str) -> httpx.Client:
    client = httpx.Client(base_url=base_url, timeout=30)
    page = client.get("/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    response = client.post("/login/", data={"username": username, "password": password,
                                            "csrfmiddlewaretoken": token})
    assert response.status_code == 302, response.text[:500]
    return client


def post_form(client: httpx.Client, path: str, data: dict, headers: dict | None = None):
    """A form post as the browser makes it: the CSRF token from the cookie."""
    headers = {"X-CSRFToken": client.cookies["csrftoken"],
               "Referer": str(client.base_url) + path, **(headers or {})}
    return client.post(path, data=data, headers=headers)


@dataclass
class Scrape:
    at: float
    samples: dict = field(default_factory=dict)  # (name, frozenset(labels)) -> value

    def value(self, name: str, **labels) -> float:
        """The sum of the samples of `name` whose labels include `labels` (0: none)."""
        wanted = set(labels.items())
        return sum(v for (n, ls), v in self.samples.items() if n == name and wanted <= ls)

    def has(self, name: str) -> bool:
        return any(n == name for n, _ in self.samples)


def scrape(base_url: str, token: str = TOKEN) -> Scrape:
    response = httpx.get(f"{base_url}/metrics", headers={"Authorization": f"Bearer {token}"},
                         timeout=30)
    assert response.status_code == 200, response.text[:500]
    result = Scrape(at=time.time())
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            result.samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return result
