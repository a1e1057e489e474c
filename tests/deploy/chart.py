"""Rendering the Helm chart offline (Helm's Go SDK through helm-python-sdk) for the deploy tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "webhook-dispatcher"
# The Kubernetes version manifests are validated against (kubernetes-validate's schemas, strict:
# an unknown field fails), and the floor of the chart's kubeVersion as well.
KUBE_VERSION = "1.30.0"
BROKER = "kafka://kafka-0.kafka:9092"
RELEASE, NAMESPACE = "hooks", "webhooks"


@dataclass(frozen=True)
class Render:
    """The manifests of one render, by kind and name."""

    manifests: list[dict[str, Any]]
    notes: str

    def kinds(self) -> list[str]:
        return sorted(m["kind"] for m in self.manifests)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [m for m in self.manifests if m["kind"] == kind]

    def one(self, kind: str) -> dict[str, Any]:
        found = self.of(kind)
        assert len(found) == 1, f"{len(found)} {kind}"
        return found[0]

    @property
    def statefulset(self) -> dict[str, Any]:
        return self.one("StatefulSet")

    @property
    def container(self) -> dict[str, Any]:
        containers = self.statefulset["spec"]["template"]["spec"]["containers"]
        return next(c for c in containers if c["name"] == "worker")

    def env(self) -> dict[str, dict[str, Any]]:
        """The worker container's env entries by name."""
        return {e["name"]: e for e in self.container["env"]}


def with_broker(values: dict[str, Any] | None = None) -> dict[str, Any]:
    """`values` with the one required value set (deep-merged by Helm)."""
    merged = dict(values or {})
    merged["kafka"] = {"broker": BROKER, **merged.get("kafka", {})}
    return merged


def render(values: dict[str, Any] | None = None) -> Render:
    with helm.Chart.load(CHART) as chart:
        out = chart.render(with_broker(values), name=RELEASE, namespace=NAMESPACE, is_install=True)
    manifests: list[dict[str, Any]] = []
    notes = ""
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            notes = text
            continue
        manifests += [doc for doc in yaml.safe_load_all(text) if doc]
    return Render(manifests, notes)
