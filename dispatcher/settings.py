"""Settings: every one is an environment variable `DISPATCHER_<NAME>`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class SettingsError(ValueError):
    pass


@dataclass(slots=True, frozen=True)
class Settings:
    broker: str = "kafka://127.0.0.1:9092"
    app_id: str = "webhook-dispatcher"
    web_host: str = "127.0.0.1"
    web_port: int = 8080
    data_dir: Path = Path("./data")
    partitions: int = 8
    api_token: str = ""
    allow_targets: str = ""
    require_https: bool = True
    log_level: str = "info"
    # delivery
    timeout: float = 15.0
    connect_timeout: float = 5.0
    response_cap: int = 64 * 1024
    max_in_flight: int = 512
    retry_base: float = 0.5
    retry_cap: float = 60.0
    # intake
    max_payload: int = 256 * 1024
    max_batch: int = 1000
    max_request_body: int = 32 * 1024 * 1024
    dedup_window: float = 24 * 3600.0
    # kafka consumer group tuning (short values make failover fast on a laptop)
    session_timeout: float = 10.0
    heartbeat_interval: float = 1.0
    commit_interval: float = 1.0
    producer_linger: float = 0.0
    # Upper bound of a consumer's long poll. Real Kafka answers a poll as soon
    # as data arrives; the embedded broker does not, so `dev` lowers this.
    fetch_max_wait_ms: int = 500
    # Bytes per producer batch. The embedded broker reports a partition's end
    # offset as the last *batch's* base offset + 1, which makes Faust's table
    # recovery stop short of the last records; `dev` sets 1 (one record per
    # batch) to keep recovery exact there. Real Kafka needs no such limit.
    producer_max_batch_bytes: int = 16384
    standby_replicas: int = 1

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **defaults: Any) -> Settings:
        """Read `DISPATCHER_*` variables over `defaults` over the built-in defaults."""
        env = os.environ if env is None else env
        base = replace(cls(), **defaults)
        values = {}
        for f in fields(cls):
            raw = env.get("DISPATCHER_" + f.name.upper())
            if raw is not None:
                values[f.name] = _convert(f.name, raw, getattr(base, f.name))
        return replace(base, **values)


def _convert(name: str, raw: str, current: Any) -> Any:
    key = "DISPATCHER_" + name.upper()
    try:
        if isinstance(current, bool):
            low = raw.strip().lower()
            if low not in _TRUE | _FALSE:
                raise ValueError("expected true/false")
            return low in _TRUE
        if isinstance(current, int):
            return int(raw)
        if isinstance(current, float):
            return float(raw)
        if isinstance(current, Path):
            return Path(raw)
    except ValueError as exc:
        raise SettingsError(f"{key}={raw!r}: {exc}") from exc
    return raw
