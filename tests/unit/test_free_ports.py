"""Ports picked together are distinct, and each can be bound once they are handed out."""

from __future__ import annotations

import socket

from dispatcher.broker import free_ports


def test_ports_picked_together_are_distinct_and_free() -> None:
    # 300 picks from about 28,000 ephemeral ports: let go one by one, two of them would be the
    # same port in most rounds (the hosts benchmark's nginx then refused its duplicate listen).
    for round_ in range(3):
        host = f"127.0.1.{round_ + 1}"
        ports = free_ports(300, host)
        assert len(set(ports)) == 300
        for port in ports[:20]:
            with socket.socket() as sock:
                sock.bind((host, port))
