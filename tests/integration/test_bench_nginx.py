"""The benchmarks' nginx says why it would not start."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.nginx import NginxReceiver
from dispatcher.broker import free_port


def test_an_nginx_that_cannot_start_says_why(tmp_path: Path) -> None:
    port = free_port()
    receiver = NginxReceiver(tmp_path / "nginx", port, origins=[("127.0.0.1", port), ("127.0.0.1", port)])
    with pytest.raises(RuntimeError, match="duplicate listen") as raised:
        receiver.start()
    assert str(port) in str(raised.value)
