"""A consumer's fetch wait that rises while the broker answers a partition that is behind with nothing,
and while nothing comes at all.

The embedded broker (Tansu) lists every stored batch of a partition on each
fetch and answers with what it gathered when the fetch's max wait runs out, so
once a partition holds more batches than it can list in that wait every fetch
of it comes back empty, for ever: a restarted worker read no changelog record
of a 100,000-receiver table for minutes. A fetch that leaves a partition
behind its high watermark with no records doubles the wait (up to `cap_ms`);
once every fetched partition has caught up, the wait is the configured one
again. On Kafka a partition that is behind always answers with records, so the
wait never moves there.

Only a partition that was already behind when the fetch was sent counts as
starved. One that was caught up and got a record while the broker gathered
the answer (the high watermark moved, the records came too late for it) is
the normal case of a live partition: counting it doubled the wait several
times a second at a steady 200 messages/s and doubled the paced latency.

The same broker's short wait (2 ms in `dev`) made an idle worker poll
hundreds of times a second, for a large share of a core (worker and broker)
and of a backlog drain's CPU. Once fetches have come back empty, with every
partition caught up, for `idle_after_ms` of waiting, the wait doubles up to
`idle_cap_ms`; the first record brings it back to the configured wait. (A
starved wait stays up while records come and a partition is still behind; a
quiet spell's wait must not, since an answer with records always leaves its
partition behind the new high watermark.) A steady flow never goes idle that
long, so only the first record after a quiet spell waits up to `idle_cap_ms`
more. On Kafka the configured wait is above the idle cap, so nothing changes.

A quiet spell's wait is never more than a quarter of the spell so far
(`IDLE_SHARE`): the first record after a spell waits at most a quarter of it
more, and the longer the spell, the less the broker is asked for nothing.
Those idle polls cost the embedded broker about the same for each partition a
fetch names, whether or not anything comes, so they were most of what it
spent during a two-worker drain, whose source is read to its end in the first
second. The figures are in docs/architecture.md, "Broker notes".

A sparse steady flow is the same trade between polls and latency, shorter: a
record every 20 to 100 ms never makes a quiet spell, so the configured 2 ms
asked 8 to 40 times for each record (what that cost a worker and the broker is
in docs/benchmarks.md, "Steady traffic"). So the wait while records flow is an
eighth of the recent gap between them (`FLOW_SHARE`), never below the
configured wait. `gap_ms` is the time between answers with records, counted
only when the records came to a consumer that had caught up (records known to
be left, as in a drain, say nothing of the gap) and only when shorter than
`idle_after_ms` (a quiet spell, a start or a rebalance is no gap of a flow). A
shorter gap counts at once and a longer one by a part (`GAP_WEIGHT`), so a
burst after a trickle is back at the configured wait after its first few
records. In the model of tests/integration/test_fetch_wait.py that is fewer
than half the fixed wait's polls a record at 20/s and at 10/s, and a record
waits at most about an eighth of the gap more; 50 records a second and more,
bursts, and a drain keep the configured wait.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CAP_MS = 2000
IDLE_AFTER_MS = 100
IDLE_CAP_MS = 250  # DISPATCHER_FETCH_IDLE_WAIT_MS's default
FEED_IDLE_CAP_MS = 1000  # DISPATCHER_FEED_IDLE_WAIT_MS's default: the compacted feeds' quiet poll
IDLE_SHARE = 4  # a quiet spell's wait is at most 1/IDLE_SHARE of the spell so far
FLOW_SHARE = 8  # a flow's wait is at most 1/FLOW_SHARE of the recent gap between its records
GAP_WEIGHT = 0.25  # a longer gap's weight in the smoothed gap between records (a shorter one counts at once)


@dataclass
class FetchWait:
    """The next fetch's max wait, from what the last fetch brought."""

    base_ms: int
    cap_ms: int = CAP_MS
    idle_cap_ms: int = IDLE_CAP_MS
    idle_after_ms: int = IDLE_AFTER_MS
    current_ms: int = field(init=False)
    idle_ms: int = field(init=False, default=0)  # waited on empty answers since the last record
    starving: bool = field(init=False, default=False)  # the wait is up because of starvation
    gap_ms: float = field(init=False, default=0.0)  # the smoothed time between answers with records
    since_ms: float = field(init=False, default=0.0)  # time since the last answer with records
    was_behind: bool = field(init=False, default=False)  # the last answer left records to fetch

    def __post_init__(self) -> None:
        self.cap_ms = max(self.cap_ms, self.base_ms)
        self.idle_cap_ms = max(self.idle_cap_ms, self.base_ms)
        self.current_ms = self.base_ms

    def after_fetch(
        self, behind: bool, starved: bool, brought: bool, took_ms: float | None = None,
        asked_behind: bool | None = None,
    ) -> int:
        """`behind`: a fetched partition is short of its high watermark; `starved`: one got nothing;
        `brought`: the answer carried records; `took_ms`: the time since the previous answer (by
        default the wait, which is what an empty answer takes on the embedded broker);
        `asked_behind`: a partition was known to be behind when the fetch was sent (by default,
        whether the previous answer said one was)."""
        self.since_ms += self.current_ms if took_ms is None else took_ms
        if asked_behind is None:
            asked_behind = self.was_behind
        self.was_behind = behind or starved
        if starved:  # not a gap between records: they were there and did not come
            self.idle_ms = 0
            self.since_ms = 0.0
            self.starving = True
            self.current_ms = min(self.cap_ms, max(1, self.current_ms) * 2)
        elif behind or brought:  # records came, or are there to fetch
            # Records came to a consumer that had caught up: a gap of the flow ends. (Records
            # fetched while some were known to be left, in a drain or once they landed, say
            # nothing of it.)
            if not asked_behind and self.since_ms < self.idle_after_ms:  # a quiet spell is no gap
                # A shorter gap counts at once (a burst must not wait on a trickle's estimate); a
                # longer one moves the estimate by a part.
                gap = self.since_ms
                self.gap_ms = gap if gap < self.gap_ms else self.gap_ms + (gap - self.gap_ms) * GAP_WEIGHT
            self.since_ms = 0.0
            self.idle_ms = 0
            # A wait raised by starvation stays while it works (records come, some still behind);
            # one raised by a quiet spell ends with it. (A fetch that brings records always leaves
            # its partition "behind": the answer's high watermark is above the offset asked for.)
            if not (behind and self.starving):
                self.starving = False
                self.current_ms = self.flowing_ms
        else:  # caught up and nothing came: idle (a starved wait counts only up to the idle cap)
            self.starving = False
            self.idle_ms += min(self.current_ms, self.idle_cap_ms)
            if self.idle_ms < self.idle_after_ms:
                self.current_ms = self.flowing_ms
            else:
                share = max(self.flowing_ms, self.idle_ms // IDLE_SHARE)
                self.current_ms = min(self.idle_cap_ms, max(1, self.current_ms) * 2, share)
        return self.current_ms

    @property
    def flowing_ms(self) -> int:
        """The wait while records flow: an eighth of their recent gap, at least the configured wait."""
        return max(self.base_ms, min(self.idle_cap_ms, int(self.gap_ms) // FLOW_SHARE))
