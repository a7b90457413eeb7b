"""The Grafana dashboard (docs/grafana-dashboard.json) asks only for metrics that exist,
so a renamed metric cannot leave a panel silently empty. The budgets row names the
tokens and cost metrics the budgets feature will add (runs/observability/metrics.py)."""

from __future__ import annotations

import json
import re

import pytest
from prometheus_client import REGISTRY

from runs.observability.collector import DatabaseCollector
from tests.support.processes import ROOT

DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"
SUFFIXES = ("_bucket", "_count", "_sum", "_total")


def expressions(panels):
    for panel in panels:
        yield from (target["expr"] for target in panel.get("targets", []))
        yield from expressions(panel.get("panels", []))


def exposed_names(families) -> set[str]:
    names = set()
    for family in families:
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
        if family.type == "counter":
            names.add(family.name + "_total")
        if family.type == "histogram":
            names.update(family.name + s for s in ("_bucket", "_count", "_sum"))
    return names


@pytest.mark.django_db
def test_every_metric_the_dashboard_uses_is_exposed():
    dashboard = json.loads(DASHBOARD.read_text())
    used = set()
    for expr in expressions(dashboard["panels"]):
        used.update(re.findall(r"\bagentops_[a-z_]+", expr))
    assert used, "the dashboard has queries"
    exposed = exposed_names(REGISTRY.collect()) | exposed_names(DatabaseCollector().collect())
    assert sorted(used - exposed) == []
    assert used >= {"agentops_tokens_total", "agentops_cost_usd_total"}, "the budgets row"


def test_panels_do_not_overlap():
    dashboard = json.loads(DASHBOARD.read_text())
    cells = {}
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]
        assert grid["x"] + grid["w"] <= 24
