"""webhook-dispatcher: signed, ordered, at-least-once webhook delivery on Kafka."""

__version__ = "0.2.0"
