"""schemathesis against a running worker: no 5xx, and every answer matches web/openapi.json."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import aiohttp
import orjson

from tests.harness import TOKEN, Api, Receiver, WorkerProcess

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


async def test_the_served_document_is_the_committed_one(worker: WorkerProcess) -> None:
    async with aiohttp.ClientSession() as session, session.get(worker.url + "/openapi.json") as resp:
        assert resp.status == 200  # no token needed
        served = await resp.read()
    committed = Path(__file__).resolve().parents[2] / "web" / "openapi.json"
    assert orjson.loads(served) == orjson.loads(committed.read_bytes())


async def test_schemathesis_finds_no_server_error_and_no_schema_mismatch(
    worker: WorkerProcess, api: Api
) -> None:
    server = await Receiver().start()
    try:
        await api.create_receiver(server.url("example"), id="rcv_example")  # the documented example id
        command = [
            sys.executable, "-m", "schemathesis.cli", "run", worker.url + "/openapi.json",
            "-H", f"Authorization: Bearer {TOKEN}", "-c", CHECKS, "-n", "15", "--generation-deterministic",
            "--request-timeout", "20",
        ]
        run = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=600)
        summary = run.stdout[-3000:]
        assert run.returncode == 0, summary
        assert " passed" in summary and "failed" not in summary.lower().split("summary")[-1], summary
    finally:
        await server.stop()
