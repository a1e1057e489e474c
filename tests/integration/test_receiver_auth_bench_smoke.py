"""bench.receiver_auth runs end to end at tiny sizes, so it cannot rot. Figures are not checked."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bench import receiver_auth

pytestmark = pytest.mark.integration


async def test_receiver_auth_bench_runs_every_mode_on_one_token(tmp_path: Path) -> None:
    result = await asyncio.to_thread(receiver_auth.main, ["--quick", "--out", str(tmp_path)])
    assert [p.name.startswith("receiver-auth-") for p in tmp_path.iterdir()] == [True]
    assert set(result["keep_alive"]) == {"none", "oauth2", "mtls"}
    assert set(result["new_connection_ms"]) == {"none", "mtls"}
    assert result["token_fetches"] == 1
