"""Workers shared by one test module, and an API client for the default one."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import pytest

from dispatcher.broker import EmbeddedBroker
from tests.harness import Api, WorkerProcess, new_app_id


@pytest.fixture(scope="module")
def make_module_worker(
    broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start a worker with extra `DISPATCHER_*` settings; each has its own app id."""
    tmp = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    workers: list[WorkerProcess] = []

    def make(**env: str) -> WorkerProcess:
        n = len(workers)
        proc = WorkerProcess(broker.url, new_app_id(), tmp / f"data{n}", tmp / f"worker{n}.log", env)
        workers.append(proc.start())
        return proc

    yield make
    for proc in workers:
        proc.stop()


@pytest.fixture(scope="module")
async def worker(make_module_worker: Callable[..., WorkerProcess]) -> AsyncIterator[WorkerProcess]:
    proc = make_module_worker()
    await proc.wait_ready()
    yield proc


@pytest.fixture
async def api(worker: WorkerProcess) -> AsyncIterator[Api]:
    client = Api(worker.url)
    yield client
    await client.close()
