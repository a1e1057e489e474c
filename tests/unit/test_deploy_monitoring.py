"""The dashboard and the alert rules in deploy/ ask only for metrics the worker exports.

The exposition is the worker's own collector (`worker_metrics.WorkerCollector`)
over a book with a failing receiver, so every family and label it can show
is there; tests/integration/test_metrics.py scrapes the same families
from a live worker.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from dispatcher.domain.actor import ReceiverState
from dispatcher.domain.breaker import Breaker, Circuit
from dispatcher.domain.records import ReceiverConfig
from dispatcher.metrics import Counts, ReceiverBook
from dispatcher.worker_metrics import LoopLag, WorkerCollector, WorkerFigures, exposition, new_registry

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "webhook-dispatcher-rules.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "webhook-dispatcher.json"
METRIC = re.compile(r"\bwebhook_dispatcher_\w+")
LABELS = re.compile(r"\b(\w+)\s*(?:=~|!~|!=|=)\s*\"")  # label matchers inside {...}
SYNTHETIC = {"up"}  # Prometheus' own series for each scrape


def exported() -> tuple[set[str], set[str]]:
    """Sample names and label names of a worker's exposition."""
    counts = Counts()
    counts.accept("api")
    counts.attempt("success", "fast", "message", 0.01)
    counts.dead_letter("max_age")
    figures = WorkerFigures(lambda: {"fast": 1}, lambda: 8, lambda: {0: 3}, lambda: 1.0, lambda: True)
    book = ReceiverBook()
    config = ReceiverConfig("r1", "https://example.com/", "whsec_" + "A" * 32)
    book.note(ReceiverState("r1", config, next_seq=2, head_accepted_at=1.0, breaker=Breaker(Circuit.OPEN)), 0)
    collector = WorkerCollector(counts, book, figures, LoopLag(), 20, frozenset())
    text = exposition(new_registry(collector)).decode()
    families = list(text_string_to_metric_families(text))
    names = {s.name for f in families for s in f.samples}
    labels = {label for f in families for s in f.samples for label in s.labels}
    return names, labels | {"receiver_id", "instance", "job", "le"}


def expressions() -> list[tuple[str, str]]:
    rules = yaml.safe_load(RULES.read_text())
    found = [(r["alert"], r["expr"]) for g in rules["groups"] for r in g["rules"]]
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        found += [(panel["title"], t["expr"]) for t in panel.get("targets", ())]
    found += [("variable " + v["name"], v["query"]["query"]) for v in dashboard["templating"]["list"]
              if isinstance(v.get("query"), dict)]
    return found


def test_every_expression_names_exported_metrics_and_labels() -> None:
    names, labels = exported()
    checked = 0
    for where, expr in expressions():
        for metric in METRIC.findall(expr):
            assert metric in names, f"{where}: {metric} is not exported"
            checked += 1
        for label in LABELS.findall(expr):
            assert label in labels, f"{where}: no metric has the label {label}"
    assert checked >= 25


def test_rules_are_alerting_rules_with_severity_and_summary() -> None:
    rules: list[dict[str, Any]] = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    alerts = {r["alert"] for r in rules}
    for needed in ("WorkerNotReady", "ReceiverDisabled", "CircuitsOpen", "OldestUndeliveredAge",
                   "ConsumerLagGrowing"):
        assert "WebhookDispatcher" + needed in alerts
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in {"warning", "critical"} and rule["annotations"]["summary"]
        assert expr_balanced(rule["expr"]), rule["alert"]
    for where, expr in expressions():
        assert METRIC.search(expr) or "up{" in expr, where
        assert not (set(re.findall(r"\b[a-z_]+(?=\{)", expr)) - SYNTHETIC - set(METRIC.findall(expr))), where


def expr_balanced(expr: str) -> bool:
    depth = 0
    for char in expr:
        depth += {"(": 1, ")": -1, "{": 1, "}": -1, "[": 1, "]": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


def test_dashboard_is_grafana_json_with_a_datasource_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "webhook-dispatcher" and dashboard["schemaVersion"] >= 36
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"datasource", "instance"}
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    targets = [t for p in dashboard["panels"] for t in p.get("targets", ())]
    assert all(t["datasource"]["uid"] == "${datasource}" for t in targets)
