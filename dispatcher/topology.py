"""Faust app, topics and tables, declared once.

All per-receiver topics and the actor table share the partition count and are
keyed by receiver id, so one worker owns a receiver's requests, outcomes and
state together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .overrides.app import DispatcherApp, QuickTableManager
from .settings import Settings


@dataclass(slots=True)
class Topology:
    app: DispatcherApp
    requests: Any  # faust.TopicT
    commands: Any
    dead_letters: Any
    subscriptions: Any  # receiver id -> its event types and tenant (every worker reads it all)
    events: Any  # events for fan-out, keyed by event id
    actors: Any  # faust.Table


def topic_names(settings: Settings) -> dict[str, str]:
    prefix = settings.app_id
    return {
        "requests": f"{prefix}.requests",
        "commands": f"{prefix}.commands",
        "dead_letters": f"{prefix}.dead-letters",
        "subscriptions": f"{prefix}.subscriptions",
        "events": f"{prefix}.events",
    }


def topic_config(settings: Settings) -> dict[str, str]:
    """Kafka settings of every topic the worker creates, changelog included (its replication aside)."""
    if settings.topic_min_insync_replicas > 0:
        return {"min.insync.replicas": str(settings.topic_min_insync_replicas)}
    return {}


def build_topology(settings: Settings, web_middlewares: list[Any]) -> Topology:
    app = DispatcherApp(settings.app_id, **faust_config(settings, web_middlewares))
    app.fetch_max_wait_ms = settings.fetch_max_wait_ms
    app.fetch_idle_wait_ms = settings.fetch_idle_wait_ms
    app.contiguous_changelogs = settings.contiguous_changelogs
    names = topic_names(settings)
    raw: dict[str, Any] = {
        "key_type": bytes,
        "value_type": bytes,
        "key_serializer": "raw",
        "value_serializer": "raw",
        "partitions": settings.partitions,
        "internal": True,  # Faust creates them with our partition count.
        "config": topic_config(settings),
    }
    requests = app.topic(names["requests"], **raw)
    commands = app.topic(names["commands"], **raw)
    dead_letters = app.topic(names["dead_letters"], **raw)
    subscriptions = app.topic(names["subscriptions"], **raw, compacting=True)
    events = app.topic(names["events"], **raw)
    actors = app.Table(
        "actors",
        partitions=settings.partitions,
        key_type=bytes,
        value_type=bytes,
        extra_topic_configs=topic_config(settings),
        options={
            "write_buffer_size": settings.table_write_buffer,
            "max_write_buffer_number": 2,
            "block_cache_size": settings.table_block_cache,
        },
    )
    return Topology(app, requests, commands, dead_letters, subscriptions, events, actors)


def faust_config(settings: Settings, web_middlewares: list[Any]) -> dict[str, Any]:
    return {
        "broker": settings.broker,
        "store": "rocksdb://",
        "TableManager": QuickTableManager,
        # Everything we store or send is bytes we encoded ourselves (orjson).
        "key_serializer": "raw",
        "value_serializer": "raw",
        "datadir": str(settings.data_dir),
        "topic_partitions": settings.partitions,
        "topic_replication_factor": settings.topic_replication,
        "table_standby_replicas": settings.standby_replicas,
        "consumer_auto_offset_reset": "earliest",
        "broker_session_timeout": settings.session_timeout,
        "broker_heartbeat_interval": settings.heartbeat_interval,
        "broker_rebalance_timeout": max(settings.session_timeout * 2, 10.0),
        "broker_commit_interval": settings.commit_interval,
        "consumer_group_instance_id": settings.instance_id or None,
        "producer_linger": settings.producer_linger,
        "producer_acks": -1,
        "producer_max_batch_size": settings.producer_max_batch_bytes,
        "producer_max_request_size": settings.max_record_bytes,
        "web_host": settings.web_host,
        "web_port": settings.web_port,
        "web_bind": settings.web_host,
        "canonical_url": settings.canonical_url(),  # DISPATCHER_ADVERTISED_URL, or derived from web_host
        "web_application_options": {
            "middlewares": web_middlewares,
            "client_max_size": settings.max_request_body,
        },
        # Faust's own debug views would expose table contents without auth.
        "web_stats_enabled": False,
        "web_graph_enabled": False,
        "web_router_enabled": False,
        "web_tables_enabled": False,
        "web_metrics_enabled": False,
        "web_cors_options": None,
    }
