"""Settings: every one is an environment variable `DISPATCHER_<NAME>`."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import resource
import socket
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from yarl import URL

from .domain.actor import Policy
from .domain.addresses import AllowList, TargetPolicy
from .domain.breaker import BreakerPolicy
from .domain.delivery_options import OVERFLOW_POLICIES
from .domain.dns_cache import DnsPolicy
from .domain.errors import InvalidInput
from .domain.lanes import Lane, LanePolicy
from .domain.retry import RetryPolicy, parse_schedule
from .domain.slots import SlotPool, parse_host_limits
from .fetch_wait import FEED_IDLE_CAP_MS, IDLE_CAP_MS
from .settings_bounds import BOUNDS, number, out_of_bounds

_TRUE = {"1", "true", "yes", "on"}
RECORD_OVERHEAD = 4096  # a record's key, headers and batch framing, beside its value
_FALSE = {"0", "false", "no", "off", ""}


log = logging.getLogger(__name__)


class SettingsError(ValueError):
    pass


@dataclass(slots=True, frozen=True)
class Settings:
    broker: str = "kafka://127.0.0.1:9092"
    app_id: str = "webhook-dispatcher"
    web_host: str = "127.0.0.1"
    web_port: int = 8080
    # The URL the other workers reach this one at (Faust's canonical_url: requests about a
    # receiver are forwarded there). Unset: http://{web_host}:{web_port}, with this host's name
    # instead of a wildcard web_host (0.0.0.0, ::), which no other worker can dial.
    advertised_url: str = ""
    data_dir: Path = Path("./data")
    partitions: int = 8
    # How the worker creates its topics when they are missing (changelog and subscriptions
    # compacted, the others deleted by the broker's retention). 1 suits a one-broker laptop; a
    # Kafka cluster wants 3 and min.insync.replicas 2 (0: the broker's own default). Topics that
    # exist are left as they are.
    topic_replication: int = 1
    topic_min_insync_replicas: int = 0
    # How the worker reaches Kafka: PLAINTEXT (empty), SSL, SASL_PLAINTEXT or SASL_SSL. SSL checks
    # the brokers against kafka_ca_file (empty: the system's CAs), with a client certificate for
    # mutual TLS if kafka_cert_file is set; SASL logs in as kafka_sasl_username (PLAIN or SCRAM).
    kafka_security_protocol: str = ""
    kafka_sasl_mechanism: str = "SCRAM-SHA-512"
    kafka_sasl_username: str = ""
    kafka_sasl_password: str = ""
    kafka_ca_file: str = ""
    kafka_cert_file: str = ""
    kafka_key_file: str = ""
    api_token: str = ""
    # Exceptions to the SSRF deny table: CIDRs and address:port pairs. `dev`
    # allows loopback; a worker allows nothing private unless told here.
    allow_targets: str = ""
    require_https: bool = True
    ca_file: str = ""  # extra CA bundle to trust (private receivers); verification stays on
    log_level: str = "info"
    # Faust, mode and aiokafka log below this only when log_level is debug (logs.py).
    library_log_level: str = "warning"
    log_format: str = "text"  # or json: one object per line (dispatcher/log_format.py)
    # monitoring (dispatcher/metrics.py): /metrics needs this bearer token when it is set
    metrics_token: str = ""
    metrics_top_receivers: int = 20  # per-receiver lag series: the N oldest backlogs
    metrics_receivers: str = ""  # comma-separated receiver ids that always get per-receiver series
    trace_receivers: str = ""  # receiver ids ("*": all) whose requests carry a traceparent header
    # uvloop (the default) or asyncio: see dispatcher/event_loop.py
    event_loop: str = "uvloop"
    # delivery
    timeout: float = 15.0
    connect_timeout: float = 5.0
    response_cap: int = 64 * 1024
    # http1 (dispatcher/http1.py, the default) or aiohttp: the client that makes deliveries
    http_client: str = "http1"
    # DNS of receiver hosts (dispatcher/dns_resolver.py): each lookup's timeout, its wait for a slot
    # included, and the lookups in flight per worker, so slow names cannot hold up the others
    dns_timeout: float = 5.0
    dns_max_lookups: int = 64
    # receivers
    verify_endpoints: bool = False  # default of a receiver's `verify`
    secret_grace: float = 86400.0  # how long a rotated-out secret still signs
    ui_session_ttl: float = 43200.0  # seconds a developer-console login lasts (web/ui/session.py)
    # isolation: in-flight POSTs per worker (0: from the file-descriptor limit),
    # per host (`host_limits` overrides: "host=n,host=n"), a tenant's share of
    # each lane, and the slow lane's own budget and pace
    max_in_flight: int = 0
    host_limit: int = 64
    host_limits: str = ""
    tenant_share: float = 0.5  # of each lane's slots, for one tenant's receivers at once (1: no cap)
    slow_lane_in_flight: int = 16
    slow_lane_rate: float = 50.0  # slow-lane POSTs per second per worker
    # penalty box: p90 of the last `slow_window` answers over `slow_after_ms`
    # (0 turns lanes off), or `slow_timeouts` timeouts in a row; parole after
    # `parole_after` fast answers in a row
    slow_after_ms: float = 2000.0
    slow_window: int = 10
    slow_min_samples: int = 3
    slow_timeouts: int = 3
    parole_after: int = 5
    # backlog caps per receiver (a receiver's own setting wins) and batching
    backlog_max: int = 1_000_000
    backlog_max_bytes: int = 1 << 30
    backlog_overflow: str = "dead_letter_oldest"
    batch_max_bytes: int = 1 << 20
    # retries: a comma-separated schedule of delays after each failure, or
    # "exponential" (retry_base x 2^(n-1) with full jitter, capped at retry_cap)
    retry_schedule: str = "5s,5m,30m,2h,5h,10h,10h,14h,20h,24h"
    retry_base: float = 5.0
    retry_cap: float = 86400.0
    max_attempts: int = 0  # 0: one more than the schedule's length
    max_age: float = 3 * 86400.0
    # circuit breaker and offline receivers
    breaker_failures: int = 5
    breaker_window: int = 20
    breaker_ratio: float = 0.5
    probe_base: float = 5.0
    probe_cap: float = 300.0
    disable_after: float = 5 * 86400.0
    max_asked_pause: float = 3600.0  # the longest pause a receiver may ask for (webhook-delivery-control)
    attempt_log: int = 50
    dead_letters_keep: int = 10_000
    timer_resolution: float = 0.01
    # intake
    max_payload: int = 256 * 1024
    max_batch: int = 1000
    max_request_body: int = 32 * 1024 * 1024
    # The largest record the worker produces (Kafka's default `max.message.bytes` is about 1 MB).
    # A message whose stored entry, or an event whose copies, would not fit is dead-lettered as
    # `too_large` instead of failing the changelog or fan-out again and again.
    max_record_bytes: int = 1_000_000
    dedup_window: float = 24 * 3600.0
    # Settled messages stay readable through GET /v1/receivers/{id}/events this long (0: off).
    retain_seconds: float = 24 * 3600.0
    # kafka consumer group tuning (short values make failover fast on a laptop)
    session_timeout: float = 10.0
    heartbeat_interval: float = 1.0
    # Kafka static membership: a worker that comes back under the same id (a
    # StatefulSet pod's name) takes over its partitions at once, without the
    # session timeout that a dead member's partitions otherwise wait out.
    instance_id: str = ""
    commit_interval: float = 1.0
    producer_linger: float = 0.0
    # How long table writes pile up before they go to the changelog: fewer, larger batches. Deliveries
    # never wait for it; a commit flushes first.
    changelog_linger_ms: float = 5.0
    # Seconds between handing the heap's free pages back to the OS (0: never); see heap.py.
    heap_trim_interval: float = 30.0
    # Upper bound of a consumer's long poll. Real Kafka answers a poll as soon
    # as data arrives; the embedded broker does not, so `dev` lowers this.
    fetch_max_wait_ms: int = 500
    # After 100 ms of empty answers the fetch wait doubles up to this (never below fetch_max_wait_ms,
    # never past a quarter of the quiet spell so far), and the next record brings it back, so an
    # idle worker on the embedded broker does not poll its 2 ms wait away. Only the first record
    # after a quiet spell waits for it (fetch_wait.py).
    fetch_idle_wait_ms: int = IDLE_CAP_MS
    # The same for the subscription and token feeds (every worker reads them whole, outside the
    # group; they change seldom). Reads that must see a change sync first (compacted_feed.py): on
    # the embedded broker that waits out the pending poll and one more at 100 ms, 1.1 s at most,
    # inside the API's 2 s for a token or receiver made a moment ago on another worker.
    feed_idle_wait_ms: int = FEED_IDLE_CAP_MS
    # Bytes per producer batch.
    producer_max_batch_bytes: int = 16384
    # The broker never compacts a changelog, so any jump in a changelog's
    # offsets while reading it is a fault to read again, not a compacted
    # record (see overrides/consumer.py). `dev` sets it; never on a
    # broker that compacts.
    contiguous_changelogs: bool = False
    standby_replicas: int = 1
    # RocksDB memory per table partition: memtables (2 x write buffer) and the
    # block cache. Faust's defaults (64 MiB buffers, a 2 GiB cache) would let
    # a worker's RSS grow with what it stores (docs/benchmarks.md has the figures).
    table_write_buffer: int = 1 << 20
    table_block_cache: int = 2 << 20

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
        settings = replace(base, **values)
        settings.check_ranges()
        return settings

    def check_ranges(self) -> None:
        """Raise SettingsError naming every numeric setting out of its range (settings_bounds.py)."""
        problems = out_of_bounds({name: getattr(self, name) for name in BOUNDS})
        if self.heartbeat_interval >= self.session_timeout:
            problems.append(f"DISPATCHER_HEARTBEAT_INTERVAL={number(self.heartbeat_interval)}: must be less "
                            f"than DISPATCHER_SESSION_TIMEOUT ({number(self.session_timeout)})")
        if self.slow_min_samples > self.slow_window:
            problems.append(f"DISPATCHER_SLOW_MIN_SAMPLES={self.slow_min_samples}: must be at most "
                            f"DISPATCHER_SLOW_WINDOW ({self.slow_window}), the answers kept")
        if self.topic_min_insync_replicas > self.topic_replication:
            problems.append(f"DISPATCHER_TOPIC_MIN_INSYNC_REPLICAS={self.topic_min_insync_replicas}: must "
                            f"be at most DISPATCHER_TOPIC_REPLICATION ({self.topic_replication}), or no "
                            "write could ever be acknowledged")
        if problems:
            raise SettingsError("; ".join(problems))

    def canonical_url(self, host_name: Callable[[], str] | None = None) -> str:
        """The URL this worker advertises to the others (checked; see `advertised_url`)."""
        if self.advertised_url:
            return check_advertised_url(self.advertised_url)
        if not is_wildcard(self.web_host):
            return str(URL.build(scheme="http", host=self.web_host.strip("[]"), port=self.web_port))
        url = str(URL.build(scheme="http", host=(host_name or own_host_name)(), port=self.web_port))
        # A warning: logging is not set up yet when the app is built, and a guess deserves one.
        log.warning(
            "DISPATCHER_WEB_HOST=%s binds every interface; advertising %s to the other workers "
            "(set DISPATCHER_ADVERTISED_URL if they cannot reach it there)", self.web_host, url,
        )
        return url

    def target_policy(self) -> TargetPolicy:
        with _as_settings_error():
            return TargetPolicy(AllowList.parse(self.allow_targets))

    def dns_policy(self) -> DnsPolicy:
        with _as_settings_error():
            return DnsPolicy(timeout=self.dns_timeout, max_lookups=self.dns_max_lookups)

    def policy(self) -> Policy:
        """The actor's default policy; a receiver's `retry` object overrides its part."""
        with _as_settings_error():
            schedule = parse_schedule(self.retry_schedule, "DISPATCHER_RETRY_SCHEDULE")
        default_attempts = len(schedule) + 1 if schedule else 20
        retry = RetryPolicy(
            schedule=schedule,
            base=self.retry_base,
            cap=self.retry_cap,
            max_attempts=self.max_attempts or default_attempts,
            max_age=self.max_age,
        )
        breaker = BreakerPolicy(
            self.breaker_failures, self.breaker_window, self.breaker_ratio, self.probe_base, self.probe_cap
        )
        if self.backlog_overflow not in OVERFLOW_POLICIES:
            raise SettingsError(
                f"DISPATCHER_BACKLOG_OVERFLOW={self.backlog_overflow!r}: must be one of "
                + ", ".join(OVERFLOW_POLICIES)
            )
        lanes = LanePolicy(
            self.slow_after_ms, self.slow_window, self.slow_min_samples, self.slow_timeouts, self.parole_after
        )
        return Policy(
            retry, breaker, self.dedup_window, self.disable_after, self.dead_letters_keep,
            lanes=lanes, backlog_max=self.backlog_max, backlog_max_bytes=self.backlog_max_bytes,
            max_entry_bytes=self.max_record_bytes - RECORD_OVERHEAD,
            backlog_overflow=self.backlog_overflow, batch_max_bytes=self.batch_max_bytes,
            retain=self.retain_seconds, max_asked_pause=self.max_asked_pause,
        )

    def fast_lane_in_flight(self) -> int:
        """The worker's in-flight bound: as set, or well below the file-descriptor limit."""
        if self.max_in_flight > 0:
            return self.max_in_flight
        return in_flight_for(open_files_limit())

    def slot_pool(self) -> SlotPool[Any]:
        with _as_settings_error():
            overrides = parse_host_limits(self.host_limits, "DISPATCHER_HOST_LIMITS")
        lanes: dict[str, int] = {Lane.FAST: self.fast_lane_in_flight(), Lane.SLOW: self.slow_lane_in_flight}
        return SlotPool(lanes, self.host_limit, overrides, self.tenant_share)


@contextlib.contextmanager
def _as_settings_error() -> Iterator[None]:
    """A bad setting stops the worker with the variable at fault named."""
    try:
        yield
    except InvalidInput as exc:
        raise SettingsError(f"{exc.field}: {exc.message}") from exc


def is_wildcard(host: str) -> bool:
    """Whether binding `host` listens on every interface (empty, 0.0.0.0, ::)."""
    try:
        return not host or ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:  # a name, not an address
        return False


LOOPBACK_NAMES = {"localhost", "localhost6", "ip6-localhost", "ip6-loopback"}


def own_host_name() -> str:
    """This host's name as other hosts know it: the FQDN where there is one (a StatefulSet pod's
    /etc/hosts lists `pod.service.namespace.svc...`), else the plain host name.

    getfqdn says "localhost" where /etc/hosts puts the host's name on a loopback line after it.
    """
    fqdn = socket.getfqdn()
    if fqdn and fqdn.split(".")[0].lower() not in LOOPBACK_NAMES:
        return fqdn
    return socket.gethostname()


def check_advertised_url(raw: str) -> str:
    """DISPATCHER_ADVERTISED_URL as Faust's canonical_url: scheme, host and port only.

    Forwarding keeps the request's own path and query and sends the API token, so a path would be
    ignored and credentials would leak into every worker's routing table: both are refused.
    """
    why = 'must be an absolute http:// or https:// URL such as "http://worker-0.dispatcher:8080"'
    try:
        url = URL(raw.strip())
        port = url.port
    except ValueError as exc:
        raise SettingsError(f"DISPATCHER_ADVERTISED_URL={raw!r}: {why} ({exc})") from exc
    if url.scheme not in ("http", "https") or not url.host or port is None:
        raise SettingsError(f"DISPATCHER_ADVERTISED_URL={raw!r}: {why}")
    extras = (url.user, url.password, url.query_string, url.fragment, url.path.strip("/"))
    if any(extras):
        raise SettingsError(f"DISPATCHER_ADVERTISED_URL={raw!r}: scheme, host and port only (no path, "
                            "query, fragment or credentials)")
    return str(url.with_path(""))


def open_files_limit() -> int:
    """The soft limit on open files, raised to the hard limit first where allowed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else 65536


def in_flight_for(open_files: int) -> int:
    """Half the descriptors left after a reserve for Kafka, RocksDB and the API, at most 4096."""
    return max(8, min(4096, (open_files - 256) // 2))


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
