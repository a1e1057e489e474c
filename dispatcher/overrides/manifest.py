"""Every private name of faust-streaming, mode, aiokafka and rocksdict this package relies on.

`problems()` checks them against the installed packages: each must still
exist, a method must keep its parameters, and a function we copied or
replaced whole must still read as the one we copied (a digest of its source).
`tests/unit/test_overrides_guard.py` runs it, so an upgrade that moves any of
them fails with a message naming each one, instead of failing in production.
After an upgrade: re-read each override against the new code, then update
`TESTED_WITH`, the pins in pyproject.toml and the digests here.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

# The versions the overrides were written against; pyproject.toml pins the same.
TESTED_WITH = {
    "faust-streaming": "0.15.3",
    "mode-streaming": "0.7.1",
    "aiokafka": "0.14.0",
    "rocksdict": "0.3.29",
}

FAUST_CONSUMER = "faust.transport.drivers.aiokafka:Consumer"
FAUST_THREAD = "faust.transport.drivers.aiokafka:AIOKafkaConsumerThread"
FAUST_PRODUCER = "faust.transport.drivers.aiokafka:Producer"
FAUST_BUFFER = "faust.transport.producer:ProducerBuffer"
FAUST_STORE = "faust.stores.rocksdb:Store"
AIOKAFKA_CONSUMER = "aiokafka:AIOKafkaConsumer"
AIOKAFKA_FETCHER = "aiokafka.consumer.fetcher:Fetcher"
AIOKAFKA_PRODUCER = "aiokafka:AIOKafkaProducer"
AIOKAFKA_CLIENT = "aiokafka.client:AIOKafkaClient"
AIOKAFKA_COORDINATOR = "aiokafka.consumer.group_coordinator:GroupCoordinator"


@dataclass(frozen=True, slots=True)
class Reliance:
    """One name of another package's class that an override uses, overrides or copies."""

    owner: str  # "module:Class"
    name: str
    user: str  # the module of ours that relies on it
    params: tuple[str, ...] | None = None  # a method's parameter names (self excluded); None: an attribute
    source_digest: str = ""  # a function we copied or replaced whole: sha256 of its source, 16 hex digits

    @property
    def label(self) -> str:
        return f"{self.owner}.{self.name} (used by dispatcher.overrides.{self.user})"


def _method(owner: str, name: str, user: str, *params: str, digest: str = "") -> Reliance:
    return Reliance(owner, name, user, tuple(params), digest)


def _attribute(owner: str, name: str, user: str) -> Reliance:
    return Reliance(owner, name, user)


RELIANCES: tuple[Reliance, ...] = (
    # consumer.py: the strict, in-order hand-over and the commit guard
    _method(FAUST_CONSUMER, "_drain_messages", "consumer", "fetcher", digest="44a2500309e83c63"),
    _method(FAUST_CONSUMER, "_new_offset", "consumer", "tp", digest="1d2c7ea89a7ad4f1"),
    _method(FAUST_CONSUMER, "_new_consumer_thread", "consumer"),
    _method(FAUST_CONSUMER, "_add_gap", "consumer", "tp", "offset_from", "offset_to"),
    _method(FAUST_CONSUMER, "perform_seek", "consumer"),
    _method(FAUST_CONSUMER, "seek_wait", "consumer", "partitions"),
    _method(FAUST_CONSUMER, "seek", "consumer", "partition", "offset"),
    _method(FAUST_CONSUMER, "track_message", "consumer", "message"),
    _method(FAUST_CONSUMER, "ack", "consumer", "message"),
    _method(FAUST_CONSUMER, "getmany", "consumer", "timeout"),
    _attribute(FAUST_CONSUMER, "_read_offset", "consumer"),
    _attribute(FAUST_CONSUMER, "_committed_offset", "consumer"),
    _attribute(FAUST_CONSUMER, "_acked", "consumer"),
    _attribute(FAUST_CONSUMER, "_gap", "consumer"),
    _attribute(FAUST_CONSUMER, "_unacked_messages", "consumer"),
    _attribute(FAUST_CONSUMER, "_n_acked", "consumer"),
    _attribute(FAUST_CONSUMER, "_commit_every", "consumer"),
    _attribute(FAUST_CONSUMER, "_stopped", "consumer"),
    _attribute(FAUST_CONSUMER, "consumer_stopped_errors", "consumer"),
    _method(FAUST_THREAD, "_create_worker_consumer", "consumer", "transport"),
    _method(FAUST_THREAD, "_highwaters", "consumer", "partitions", digest="a7f4f97d9f32aca2"),
    _method(FAUST_THREAD, "_ensure_consumer", "consumer"),
    # fetcher.py and consumer.py: the fetch wait
    _attribute(AIOKAFKA_CONSUMER, "_fetcher", "fetcher"),
    _attribute(AIOKAFKA_CONSUMER, "_fetch_max_wait_ms", "consumer"),
    _method(AIOKAFKA_FETCHER, "_proc_fetch_request", "fetcher", "assignment", "node_id", "request"),
    _attribute(AIOKAFKA_FETCHER, "_fetch_max_wait_ms", "fetcher"),
    _attribute(AIOKAFKA_FETCHER, "_records", "fetcher"),
    # leave.py: a clean stop leaves the group from generation 0 too
    _attribute(AIOKAFKA_CONSUMER, "_coordinator", "consumer"),
    _method(AIOKAFKA_COORDINATOR, "_maybe_leave_group", "leave", digest="016cd88a16e6c4b5"),
    _method(AIOKAFKA_COORDINATOR, "_send_req", "leave", "request"),
    _method(AIOKAFKA_COORDINATOR, "reset_generation", "leave"),
    _attribute(AIOKAFKA_COORDINATOR, "_group_instance_id", "leave"),
    # resume.py: a static member's clean stop hands its membership to its restart
    _method(AIOKAFKA_COORDINATOR, "_on_join_complete", "resume", "generation", "member_id", "protocol",
            "member_assignment_bytes", digest="0b0b3d204b408f3c"),
    _method(AIOKAFKA_COORDINATOR, "_do_rejoin_group", "resume", "subscription"),
    _method(AIOKAFKA_COORDINATOR, "_get_metadata_snapshot", "resume"),
    _method(AIOKAFKA_COORDINATOR, "_lookup_assignor", "resume", "name"),
    _attribute(AIOKAFKA_COORDINATOR, "_closing", "resume"),
    _attribute(AIOKAFKA_COORDINATOR, "_subscription", "resume"),
    _attribute(AIOKAFKA_COORDINATOR, "_group_subscription", "resume"),
    _attribute(AIOKAFKA_COORDINATOR, "_rejoin_needed_fut", "resume"),
    _attribute(AIOKAFKA_COORDINATOR, "_metadata_snapshot", "resume"),
    _attribute(AIOKAFKA_COORDINATOR, "_client", "resume"),
    _attribute(AIOKAFKA_COORDINATOR, "_session_timeout_ms", "resume"),
    _attribute(AIOKAFKA_COORDINATOR, "_heartbeat_interval_ms", "resume"),
    _method(AIOKAFKA_CLIENT, "_maybe_wait_metadata", "resume"),
    # ... and the resumed assignment must pass Faust's assignor as a joined one does
    _method("faust.assignor.partition_assignor:PartitionAssignor", "on_assignment", "resume", "assignment",
            digest="72f34bf053d696b5"),
    # producer.py: a flush that drains
    _method(FAUST_BUFFER, "_send_pending", "producer", "fut"),
    _method(FAUST_BUFFER, "flush", "producer", digest="26fbebb124ad9c98"),
    # ... and what that flush relies on: the buffer sends through `_send_pending` (so `_sending`
    # counts every send), the producer's flush flushes the buffer, and a commit flushes the
    # producer before it commits (invariant 1).
    _method(FAUST_BUFFER, "_handle_pending", "producer", digest="78d648030fd21016"),
    _method(FAUST_PRODUCER, "flush", "producer", digest="36d0cb3615f65b01"),
    _method("faust.transport.consumer:Consumer", "_commit_offsets", "producer", "offsets",
            "start_new_transaction", digest="1a69799041188441"),
    # consumer.py: Faust's fetcher is what runs our `_drain_messages`.
    _method("faust.transport.consumer:Fetcher", "_fetcher", "consumer", digest="68f894f0b577d810"),
    _attribute("faust.transport.consumer:Fetcher", "_stopped", "consumer"),
    _attribute(FAUST_BUFFER, "message_sent", "producer"),
    # producer.py: the aiokafka producer Faust builds is ours, and it tracks each topic it sends to
    _attribute(FAUST_PRODUCER, "_producer_type", "producer"),
    _method(FAUST_PRODUCER, "_new_producer", "producer", "transactional_id", digest="e72355c3430ed02f"),
    _method(AIOKAFKA_PRODUCER, "send", "producer", "topic", "value", "key", "partition", "timestamp_ms",
            "headers"),
    _method(AIOKAFKA_PRODUCER, "send_batch", "producer", "batch", "topic", "partition"),
    # ... because a refresh asks for the tracked topics only (or all while none is) and replaces
    # what the client knew, and a send tracks its topic only when the client does not know it.
    _method(AIOKAFKA_CLIENT, "_wait_on_metadata", "producer", "topic", digest="52b0a5ee78ef3aa0"),
    _method(AIOKAFKA_CLIENT, "_md_synchronizer", "producer", digest="e0421bffa9a7735a"),
    # app.py: the factories Faust builds its parts with
    _method("faust:App", "_new_transport", "app"),
    _method("faust:App", "_new_producer_transport", "app"),
    _method("faust.tables.manager:TableManager", "on_start", "app", digest="365dd25fbc0e0684"),
    _method("faust.tables.manager:TableManager", "_update_channels", "app"),
    _method("faust:Worker", "on_setup_root_logger", "app", "logger", "level"),
    _method("faust:Worker", "_sentinel_task", "app", digest="6e66058cf3e1b616"),
    # store.py: the actor table's own changelog writer
    _method(FAUST_STORE, "_db_for_partition", "store", "partition"),
    _attribute(FAUST_STORE, "_dbs", "store"),
    _attribute(FAUST_STORE, "rocksdb_options", "store"),
    _method(FAUST_STORE, "set_persisted_offset", "store", "tp", "offset"),
    _method("faust.stores.rocksdb:RocksDBOptions", "open", "store", "path", "read_only"),
    _method("faust.stores.rocksdb:RocksDBOptions", "as_options", "store", digest="d2a1bea17736d2eb"),
    _attribute(FAUST_PRODUCER, "_producer", "store"),
    _method("rocksdict:Rdict", "set_write_options", "store", "write_opt"),
)


def resolve(owner: str) -> Any:
    """The class `module:Class` names."""
    module, _, qualname = owner.partition(":")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def _digest(function: Any) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()[:16]


def _assigned_in_source(cls: type, name: str) -> bool:
    """An instance attribute: set as `self.<name>` somewhere in the class or its bases."""
    for klass in inspect.getmro(cls):
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue  # a builtin or compiled class: its attributes are checked with hasattr
        if f"self.{name} =" in source or f"self.{name}: " in source:
            return True
    return False


def _parameters(function: Any) -> tuple[str, ...] | None:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a compiled method: no signature to compare
        return None
    names = [p.name for p in signature.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    return tuple(names[1:] if names and names[0] == "self" else names)


def _problem(reliance: Reliance, lookup: Callable[[str], Any]) -> str | None:
    try:
        cls = lookup(reliance.owner)
    except (ImportError, AttributeError) as exc:
        return f"{reliance.label}: its class is gone ({type(exc).__name__}: {exc})"
    if reliance.params is None:
        if hasattr(cls, reliance.name) or _assigned_in_source(cls, reliance.name):
            return None
        return f"{reliance.label}: attribute no longer exists"
    member = getattr(cls, reliance.name, None)
    member = getattr(member, "fun", member)  # a mode `Service.task` wraps its function
    if member is None:
        return f"{reliance.label}: method no longer exists"
    params = _parameters(member)
    if params is not None and params != reliance.params:
        return f"{reliance.label}: signature changed from {reliance.params} to {params}"
    if reliance.source_digest and _digest(member) != reliance.source_digest:
        return f"{reliance.label}: its code changed (our override copies or replaces it: re-read it)"
    return None


def problems(
    reliances: Iterable[Reliance] = RELIANCES, lookup: Callable[[str], Any] = resolve
) -> list[str]:
    """One line per private name that moved, vanished or changed; empty when all hold."""
    return [p for p in (_problem(r, lookup) for r in reliances) if p is not None]


def version_problems(tested: dict[str, str] = TESTED_WITH) -> list[str]:
    """Installed versions that differ from those the overrides were checked against."""
    found = []
    for package, version in tested.items():
        installed = metadata.version(package)
        if installed != version:
            found.append(f"{package} {installed} is installed; the overrides were checked against {version}")
    return found
