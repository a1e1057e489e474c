"""DISPATCHER_TOPIC_REPLICATION and _TOPIC_MIN_INSYNC_REPLICAS reach every topic the worker creates."""

from __future__ import annotations

from dispatcher.settings import Settings
from dispatcher.topology import build_topology, faust_config, topic_config


def test_defaults_suit_a_one_broker_laptop() -> None:
    settings = Settings.from_env({})
    assert faust_config(settings, [])["topic_replication_factor"] == 1
    assert topic_config(settings) == {}  # the broker's own min.insync.replicas


def test_a_cluster_gets_replicated_topics_with_min_insync() -> None:
    settings = Settings.from_env({"DISPATCHER_TOPIC_REPLICATION": "3",
                                  "DISPATCHER_TOPIC_MIN_INSYNC_REPLICAS": "2"})
    assert faust_config(settings, [])["topic_replication_factor"] == 3
    topology = build_topology(settings, [])
    topics = [topology.requests, topology.commands, topology.dead_letters, topology.subscriptions,
              topology.events, topology.tokens]
    assert all(t.config == {"min.insync.replicas": "2"} for t in topics)
    assert topology.subscriptions.compacting is True
    assert topology.tokens.compacting is True and topology.tokens.partitions == 1
    changelog = topology.actors.changelog_topic
    assert changelog.config == {"min.insync.replicas": "2"}
    assert changelog.compacting is True
