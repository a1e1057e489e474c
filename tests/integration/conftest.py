"""A worker shared by one test module, and an API client for it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from dispatcher.broker import EmbeddedBroker
from tests.harness import Api, WorkerProcess, new_app_id


@pytest.fixture(scope="module")
async def worker(
    broker: EmbeddedBroker, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> AsyncIterator[WorkerProcess]:
    tmp = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    proc = WorkerProcess(broker.url, new_app_id(), tmp / "data", tmp / "worker.log").start()
    await proc.wait_ready()
    yield proc
    proc.stop()


@pytest.fixture
async def api(worker: WorkerProcess) -> AsyncIterator[Api]:
    client = Api(worker.url)
    yield client
    await client.close()
