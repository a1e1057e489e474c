"""The embedded broker counts as started only once it holds its port itself."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from dispatcher.broker import BrokerError, EmbeddedBroker, listens_on


def test_a_port_another_process_listens_on_is_not_taken_for_the_broker(tmp_path: Path) -> None:
    """A port picked free can be taken before the broker binds it (two test processes, `dev` beside
    another program); what answers there must not pass for the broker."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        broker = EmbeddedBroker(port)
        with pytest.raises(BrokerError, match=f"port {port} is in use by another process"):
            broker.start(str(tmp_path / "broker.log"))
        assert broker.process is not None and broker.process.poll() is not None
        assert "in use" in (tmp_path / "broker.log").read_text(errors="replace").lower()


def test_the_running_broker_is_seen_listening_on_its_port(broker: EmbeddedBroker) -> None:
    assert broker.process is not None
    assert listens_on(broker.process.pid, broker.port) is True
    assert listens_on(broker.process.pid, broker.port + 1 if broker.port < 65535 else 1) is False
