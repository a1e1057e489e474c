"""A loopback receiver that checks per-key order as it goes, for key-ordered receivers' tests.

Each message's payload names its ordering key (`{"k": key, ...}`), so the
receiver knows it without trusting the dispatcher. A request is out of order
when an earlier seq of its key has not been answered with a 2xx yet: the
dispatcher may POST seq k+1 of a key only after seq k got its 2xx.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

import orjson

from tests.harness import Delivery, Receiver


class KeyedReceiver(Receiver):
    """Answers 200 after up to `max_delay` s, or 503 when `fail(delivery)` says so."""

    def __init__(self, seed: int = 7, max_delay: float = 0.02,
                 fail: Callable[[Delivery, str], bool] | None = None) -> None:
        super().__init__(self._behave)
        self._rng = random.Random(seed)
        self._max_delay = max_delay
        self._fail = fail or (lambda delivery, key: False)
        self.key_of: dict[tuple[str, int], str] = {}  # (path, seq) -> key
        self.ok_seqs: dict[tuple[str, str], set[int]] = {}  # (path, key) -> seqs answered 2xx
        self.violations: list[str] = []
        self.ok_order: list[tuple[str, int]] = []  # (path, seq) in the order their 2xx went
        self.open = 0
        self.most_open = 0  # requests open at once, counted as each arrives

    async def _behave(self, path: str, delivery: Delivery) -> int:
        seq = delivery.seq
        if not seq:  # a ping (an open circuit's probe): no message, no key
            return 200
        key = str(orjson.loads(delivery.body)["data"]["k"])
        self.key_of[(path, seq)] = key
        done = self.ok_seqs.setdefault((path, key), set())
        # Every earlier seq of this key that this receiver has seen must be answered already.
        pending = [s for (p, s), k in self.key_of.items()
                   if p == path and k == key and s < seq and s not in done]
        if pending:
            self.violations.append(f"{path} seq {seq} (key {key}) before {sorted(pending)[:5]} got a 2xx")
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            if self._max_delay:
                await asyncio.sleep(self._rng.uniform(0, self._max_delay))
        finally:
            self.open -= 1
        if self._fail(delivery, key):
            return 503
        done.add(seq)
        self.ok_order.append((path, seq))
        return 200

    def missing_seqs(self, path: str, count: int) -> list[int]:
        """Seqs 1..count of `path` that never got a 2xx."""
        ok = set().union(*(seqs for (p, _), seqs in self.ok_seqs.items() if p == path))
        return [s for s in range(1, count + 1) if s not in ok]

    def keys_out_of_order(self) -> list[str]:
        """Keys whose messages first arrived out of seq order (a seq never seen before a later one
        of its key is not among `violations`)."""
        last: dict[tuple[str, str], int] = {}
        bad: list[str] = []
        seen: set[str] = set()
        for d in self.deliveries:
            if d.msg_id in seen or not d.seq:
                continue
            seen.add(d.msg_id)
            name = (d.path, str(orjson.loads(d.body)["data"]["k"]))
            if d.seq < last.get(name, 0):
                bad.append(f"{name}: seq {d.seq} after {last[name]}")
            last[name] = max(d.seq, last.get(name, 0))
        return bad
