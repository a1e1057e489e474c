"""Faust app, topics and tables, declared once.

All per-receiver topics and the actor table share the partition count and are
keyed by receiver id, so one worker owns a receiver's requests, outcomes and
state together.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

import faust

from .overrides.app import DispatcherApp, QuickTableManager
from .settings import Settings, SettingsError


@dataclass(slots=True)
class Topology:
    app: DispatcherApp
    requests: Any  # faust.TopicT
    commands: Any
    dead_letters: Any
    subscriptions: Any  # receiver id -> its event types and tenant (every worker reads it all)
    events: Any  # events for fan-out, keyed by event id
    tokens: Any  # tenant token id -> its record (every worker reads it all)
    actors: Any  # faust.Table


def topic_names(settings: Settings) -> dict[str, str]:
    prefix = settings.app_id
    return {
        "requests": f"{prefix}.requests",
        "commands": f"{prefix}.commands",
        "dead_letters": f"{prefix}.dead-letters",
        "subscriptions": f"{prefix}.subscriptions",
        "events": f"{prefix}.events",
        "tokens": f"{prefix}.tokens",
    }


TOKEN_PARTITIONS = 1  # a handful of records that every worker reads whole: one partition is plenty


def topic_config(settings: Settings) -> dict[str, str]:
    """Kafka settings of every topic the worker creates, changelog included (its replication aside)."""
    if settings.topic_min_insync_replicas > 0:
        return {"min.insync.replicas": str(settings.topic_min_insync_replicas)}
    return {}


KAFKA_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def broker_credentials(settings: Settings) -> Any:
    """Faust's credentials for DISPATCHER_KAFKA_*: every Kafka client of the worker uses them."""
    protocol = settings.kafka_security_protocol.strip().upper() or "PLAINTEXT"
    if protocol not in KAFKA_PROTOCOLS:
        raise SettingsError(f"DISPATCHER_KAFKA_SECURITY_PROTOCOL={settings.kafka_security_protocol!r}: "
                            "must be one of " + ", ".join(KAFKA_PROTOCOLS))
    if protocol == "PLAINTEXT":
        return None
    context = kafka_ssl_context(settings) if protocol.endswith("SSL") else None
    if protocol == "SSL":
        return faust.SSLCredentials(context)
    mechanism = settings.kafka_sasl_mechanism.strip().upper()
    if mechanism not in SASL_MECHANISMS:
        raise SettingsError(f"DISPATCHER_KAFKA_SASL_MECHANISM={settings.kafka_sasl_mechanism!r}: "
                            "must be one of " + ", ".join(SASL_MECHANISMS))
    if not (settings.kafka_sasl_username and settings.kafka_sasl_password):
        raise SettingsError(f"DISPATCHER_KAFKA_SECURITY_PROTOCOL={protocol} needs "
                            "DISPATCHER_KAFKA_SASL_USERNAME and DISPATCHER_KAFKA_SASL_PASSWORD")
    return faust.SASLCredentials(username=settings.kafka_sasl_username, password=settings.kafka_sasl_password,
                                 ssl_context=context, mechanism=mechanism)


def kafka_ssl_context(settings: Settings) -> ssl.SSLContext:
    """Brokers verified (the given CA or the system's); a client certificate for mutual TLS if set."""
    try:
        context = ssl.create_default_context(cafile=settings.kafka_ca_file or None)
        if settings.kafka_cert_file:
            context.load_cert_chain(settings.kafka_cert_file, settings.kafka_key_file or None)
    except (OSError, ssl.SSLError) as exc:
        raise SettingsError(f"DISPATCHER_KAFKA_CA_FILE / _CERT_FILE / _KEY_FILE: {exc}") from exc
    return context


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
    tokens = app.topic(names["tokens"], **{**raw, "partitions": TOKEN_PARTITIONS}, compacting=True)
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
    return Topology(app, requests, commands, dead_letters, subscriptions, events, tokens, actors)


def faust_config(settings: Settings, web_middlewares: list[Any]) -> dict[str, Any]:
    return {
        "broker": settings.broker,
        "broker_credentials": broker_credentials(settings),
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
