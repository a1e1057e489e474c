"""A filtered listing reads a bounded number of states per page and skips nothing."""

from __future__ import annotations

from dataclasses import replace

from dispatcher.domain.actor import ReceiverState
from dispatcher.domain.records import ReceiverConfig
from web.receiver_list import Filters, page_of


def state(rid: str, disabled: bool = False) -> ReceiverState:
    return replace(ReceiverState(rid, ReceiverConfig(rid, "http://x.test/", "whsec_" + "A" * 32)),
                   disabled=disabled)


class Counted:
    """A partition's states in id order, counting how many a page reads."""

    def __init__(self, states: list[ReceiverState]) -> None:
        self.states, self.read = states, 0

    def after(self, after: str) -> object:
        for s in self.states:
            if s.receiver_id > after:
                self.read += 1
                yield s


def test_paging_a_rare_filter_reads_a_budget_per_page_and_finds_every_match() -> None:
    # 4 partitions x 1,000 receivers; 1 in 250 disabled
    parts = [Counted([state(f"r{p}-{i:05d}", disabled=i % 250 == 7) for i in range(1000)]) for p in range(4)]
    wanted = sorted(s.receiver_id for part in parts for s in part.states if s.disabled)
    found: list[str] = []
    cursor, pages = "", 0
    for _ in range(100):  # bounded
        reads_before = sum(p.read for p in parts)
        page, cut = page_of([p.after(cursor) for p in parts], Filters(disabled=True), limit=10, budget=400)
        assert sum(p.read for p in parts) - reads_before <= 400 + 4 * 10
        found += [s.receiver_id for s in page]
        pages += 1
        nxt = page[-1].receiver_id if len(page) == 10 else cut
        if nxt is None:
            break
        assert nxt > cursor, "every page moves on"
        cursor = nxt
    assert found == wanted, "nothing skipped, nothing twice, in id order"
    assert pages > 1


def test_without_a_filter_a_page_is_the_first_ids_of_all_partitions() -> None:
    parts = [Counted([state(f"r{i:03d}") for i in range(p, 60, 3)]) for p in range(3)]
    page, cut = page_of([p.after("") for p in parts], Filters(), limit=5, budget=1000)
    assert [s.receiver_id for s in page] == ["r000", "r001", "r002", "r003", "r004"] and cut is None
