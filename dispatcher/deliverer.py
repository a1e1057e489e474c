"""Runs delivery attempts off the record path and reports each outcome to the actor.

An attempt never blocks the fetch loop that applies the partition's records
(`consume.py`): it runs in its own task, and its outcome goes to the runner
(`ActorRunner.apply_outcome`, under the runner's lock), or through the commands
topic when the partition is not settled here, so only the receiver's actor
writes its state. An ordered receiver has at most one
attempt (or probe) in flight on this worker; an unordered one has one per seq
in its window, each keyed by its seq.

Every attempt needs a connection slot of its lane and of its host (`SlotPool`).
Until it gets them it waits as a small `Job` (the messages stay in the
backlog and are read only when the POST starts). A slow-lane job first waits
its turn in the paced slow-lane queue (`slow_lane.py`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Any
from urllib.parse import urlsplit

from .domain.evolve import evolve
from .domain.ids import new_id
from .domain.lanes import Lane
from .domain.records import Outcome, ReceiverConfig, Verification
from .domain.slots import SlotPool
from .domain.transform import CANCELLED, FAILED, Transformed, TransformError, inline_budget
from .domain.untrusted import one_line, outsider_text
from .domain.verification import challenge_headers, judge, new_challenge
from .domain.webhook import (
    batch_id,
    build_batch_body,
    build_batch_headers,
    build_body,
    build_headers,
    build_heartbeat,
    build_ping,
    build_ping_headers,
    build_transformed,
    transform_entry,
)
from .metrics import Counts, outcome_label
from .receiver_auth import AuthedRequests
from .tracing import Tracing
from .transport import DeliveryError, Gate, NotSent, Transport, cancel_quietly

log = logging.getLogger(__name__)

SendOutcome = Callable[[str, int, Outcome], Awaitable[None]]  # (receiver id, partition, outcome)
LostOutcome = Callable[[str, int], None]  # (receiver id, partition): wake it to try again
QueueSlow = Callable[["Job"], None]  # hands a slow-lane job to the paced slow-lane queue
# (receiver id, first seq, at most count, at most bytes) -> backlog entries, oldest first
LoadEntries = Callable[[str, int, int, int], list[dict[str, Any]]]
REPORT_TRIES = 4
API_SLOTS = 16  # pings and verifications asked for through the API
_NONE: frozenset[int] = frozenset()


@dataclass(slots=True, eq=False)
class Job:
    """One attempt (or probe) of one receiver, from the actor's decision to its outcome."""

    receiver_id: str
    partition: int
    token: str
    config: ReceiverConfig
    lane: Lane
    host: str
    seq: int = 0  # first seq; 0 for a probe
    attempt: int = 0  # attempt of the head, or the probe's number
    count: int = 1  # messages a batch may carry
    probe: bool = False
    heartbeat: int = -1  # a heartbeat's last_seq; -1: not a heartbeat
    slot: int = 0  # the seq of an unordered receiver's attempt; 0: the receiver's one job
    task: asyncio.Task[None] | None = None
    tenant: str = ""  # the receiver's tenant ("": none), whose share of the lane the job uses
    holds_slot: bool = False  # its lane's, host's and tenant's: freed once, by whoever ends the job


def lane_limits(fast: int, slow: int) -> dict[str, int]:
    return {Lane.FAST: fast, Lane.SLOW: slow}


class Deliverer:
    def __init__(
        self,
        transport: Transport,
        send_outcome: SendOutcome,
        pool: SlotPool[Job],
        load_entries: LoadEntries,
        on_lost_outcome: LostOutcome,
        queue_slow: QueueSlow | None = None,
        clock: Callable[[], float] = time.time,
        report_backoff: float = 0.5,
        batch_max_bytes: int = 1 << 20,
        may_post: Callable[[int], bool] = lambda partition: True,
        transform_pool: Executor | None = None,
    ) -> None:
        self._transport = transport
        self._requests = AuthedRequests(transport, clock)  # with the receiver's mTLS or OAuth2 `auth`
        # Transforms too heavy to finish on the loop run here, one at a time (see _shape).
        self._transform_pool = transform_pool or ThreadPoolExecutor(1, thread_name_prefix="transform")
        # Is the partition still ours (the stall fence)? Asked as the attempt starts, and again as its
        # request is written, for a worker whose loop stood still while the request waited for a connection.
        self.may_post = may_post
        self._send_outcome = send_outcome
        self.pool = pool
        self._load_entries = load_entries
        self._on_lost_outcome = on_lost_outcome
        self._queue_slow = queue_slow
        self._report_backoff = report_backoff
        self._batch_max_bytes = batch_max_bytes
        self._api_slots = asyncio.Semaphore(API_SLOTS)
        self._clock = clock
        self._jobs: dict[str, dict[int, Job]] = {}  # receiver id -> slot -> job
        # Tokens tell this worker's outcomes from those of an earlier owner.
        self._incarnation = secrets.token_hex(4)
        self._counter = 0
        self.counts = Counts()  # the worker's, for /metrics (actor_parts.py shares one)
        self.tracing = Tracing()  # off unless the worker sets it up (tracing.py)
        self.trace_receivers: frozenset[str] = frozenset()  # get the attempt's traceparent ("*": all)

    def busy(self, receiver_id: str) -> bool:
        return receiver_id in self._jobs

    def in_flight_seqs(self, receiver_id: str) -> frozenset[int]:
        """Seqs of an unordered receiver's attempts running (or waiting for a slot) here."""
        jobs = self._jobs.get(receiver_id)
        if not jobs or (len(jobs) == 1 and 0 in jobs):  # none, or an ordered receiver's one (or a probe)
            return _NONE
        return frozenset(slot for slot in jobs if slot)

    @property
    def in_flight(self) -> int:
        return sum(len(jobs) for jobs in self._jobs.values())

    def stats(self) -> dict[str, Any]:
        return {
            "attempts": self.in_flight,
            "posting": dict(self.pool.used),
            "limits": dict(self.pool.limits),
            "waiting_for_slot": self.pool.waiting,
            "hosts_posting": len(self.pool.host_used),
            "tenant_limits": dict(self.pool.tenant_limits),
            "tenant_limits_apply": self.pool.shared(),  # receivers of more than one tenant exist
            "tenants_posting": len({tenant for _, tenant in self.pool.tenant_used}),
        }

    def start(
        self, receiver_id: str, partition: int, config: ReceiverConfig, seq: int, attempt: int,
        count: int = 1, lane: Lane = Lane.FAST, parallel: bool = False,
    ) -> None:
        """Start one attempt of messages seq.. unless the receiver (or, `parallel`, that seq) has one."""
        slot = seq if parallel else 0
        self._begin(Job(receiver_id, partition, "", config, lane, "", seq, attempt, count, slot=slot))

    def start_probe(
        self, receiver_id: str, partition: int, config: ReceiverConfig, number: int, lane: Lane = Lane.FAST
    ) -> None:
        """Send a `webhook.ping` in the receiver's one slot (its circuit is open)."""
        self._begin(Job(receiver_id, partition, "", config, lane, "", 0, number, probe=True))

    def start_heartbeat(
        self, receiver_id: str, partition: int, config: ReceiverConfig, number: int, last_seq: int,
        lane: Lane = Lane.FAST,
    ) -> None:
        """Send a `webhook.heartbeat` in the receiver's one slot (it is idle)."""
        job = Job(receiver_id, partition, "", config, lane, "", 0, number, probe=True, heartbeat=last_seq)
        self._begin(job)

    def _begin(self, job: Job) -> None:
        jobs = self._jobs.setdefault(job.receiver_id, {})
        if job.slot in jobs or (not job.slot and jobs):
            return
        job.token = self._next_token()
        job.host = host_of(job.config.url)
        job.tenant = job.config.tenant or ""
        jobs[job.slot] = job
        if job.lane is Lane.SLOW and self._queue_slow is not None:
            self._queue_slow(job)
        else:
            self.submit(job)

    def _current(self, job: Job) -> bool:
        return self._jobs.get(job.receiver_id, {}).get(job.slot) is job

    def _remove(self, job: Job) -> None:
        jobs = self._jobs.get(job.receiver_id, {})
        if jobs.get(job.slot) is job:
            del jobs[job.slot]
            if not jobs:
                del self._jobs[job.receiver_id]

    def waiting(self, job: Job) -> bool:
        """The job is still current (not dropped or released) and has not started."""
        return self._current(job) and job.task is None

    def submit(self, job: Job) -> None:
        """Post now if the lane and the host have a slot, else wait for one."""
        if not self.waiting(job):
            return
        if self.pool.waiting and self.pool.share_turned_off():  # waiters held for it go first
            self._start_handed(self.pool.hand_out())
        if self.pool.try_acquire(job.lane, job.host, job.tenant):
            job.holds_slot = True
            job.task = asyncio.create_task(self._run(job))
        else:
            self.pool.park(job.lane, job.host, job, job.tenant)

    def _free_slot(self, done: Job) -> None:
        """Free the job's slot (once: a task cancelled before its first step never reaches its
        `finally`, so dropping it frees the slot too) and start the waiters it goes to."""
        if not done.holds_slot:
            return
        done.holds_slot = False
        self._start_handed(self.pool.release(done.lane, done.host, done.tenant))

    def _start_handed(self, pending: list[tuple[str, str, Job]]) -> None:
        """Start the waiters the pool gave slots to; one dropped meanwhile gives its slot back."""
        while pending:
            job = pending.pop()[2]
            if self.waiting(job):
                job.holds_slot = True
                job.task = asyncio.create_task(self._run(job))
            else:  # dropped while it waited
                pending += self.pool.release(job.lane, job.host, job.tenant)

    async def ping(self, receiver_id: str, config: ReceiverConfig) -> Outcome:
        """A ping asked for through the API: posted now, outside the receiver's slot."""
        async with self._api_slots:
            outcome = await self._post_ping(receiver_id, "manual", config)
        self.counts.attempt(outcome_label(outcome), "api", "ping", outcome.latency_ms / 1000)
        return evolve(outcome, manual=True)

    async def verify(self, config: ReceiverConfig) -> Verification:
        """Run the endpoint-verification handshake against `config.url` (asked for through the API)."""
        now = self._clock()
        challenge = new_challenge(secrets.token_bytes(24))
        headers = challenge_headers(config, challenge, new_id("verify"), now)
        async with self._api_slots:
            try:
                resp = await self._requests.send("GET", config, headers)
            except DeliveryError as exc:
                result = judge(config, challenge, None, b"", str(exc), self._clock())
            else:
                result = judge(config, challenge, resp.status, resp.body_prefix, None, self._clock())
        log.info("verification receiver_id=%s status=%s %s", config.id, result.status,
                 one_line(result.reason))
        return result

    def release(self, receiver_id: str, token: str) -> None:
        """The actor has the outcome of `token`; its slot may get the next attempt."""
        for job in list(self._jobs.get(receiver_id, {}).values()):
            if job.token == token:
                self._remove(job)

    def _next_token(self) -> str:
        self._counter += 1
        return f"{self._incarnation}-{self._counter}"

    async def drop_partitions(self, partitions: set[int]) -> None:
        """Forget attempts of receivers whose partition this worker no longer owns."""
        self.pool.drop(lambda job: job.partition in partitions)
        lost = [job for jobs in self._jobs.values() for job in jobs.values() if job.partition in partitions]
        for job in lost:
            self._remove(job)
            if job.task is not None:
                await cancel_quietly(job.task)
                self._free_slot(job)
        if self.pool.waiting:  # a waiter given a host's freed slot may have been among those dropped
            self._start_handed(self.pool.hand_out())

    async def close(self) -> None:
        await self.drop_partitions({job.partition for jobs in self._jobs.values() for job in jobs.values()})
        await self._requests.close()
        await self._transport.close()
        # A transform still running ends within its budget; those queued behind it are dropped.
        self._transform_pool.shutdown(wait=False, cancel_futures=True)

    async def _run(self, job: Job) -> None:
        """Post (holding the job's slots), then report the outcome to the actor."""
        if not self.may_post(job.partition):  # waited for a slot across a stall: ownership in doubt
            self._free_slot(job)
            self._held_back(job)
            return
        held_back = False
        try:
            outcome = await (self._probe(job) if job.probe else self._attempt(job))
        except NotSent:  # the same, found as the request was about to be written
            outcome, held_back = None, True
        except Exception as exc:  # a bug of ours must neither wedge the receiver nor loop: a failure
            log.exception("attempt failed to run receiver_id=%s seq=%s attempt=%d probe=%s",
                          job.receiver_id, job.seq, job.attempt, job.probe)
            outcome = Outcome(job.seq, "", job.token, False, None, f"internal error: {type(exc).__name__}",
                              0.0, self._clock(), attempt=job.attempt, probe=job.probe,
                              heartbeat=job.heartbeat >= 0)
        finally:
            self._free_slot(job)
        if held_back:
            self._held_back(job)
        if outcome is None:
            return
        what = "probe" if job.probe else f"msg_id={outcome.msg_id} seq={outcome.seq}"
        await self._report(job, outcome, what)

    async def _attempt(self, job: Job) -> Outcome | None:
        batching = job.config.options.batching
        limit = job.config.options.batch_max_bytes or self._batch_max_bytes
        entries = self._load_entries(job.receiver_id, job.seq, job.count if batching else 1, limit)
        if not entries:  # the actor dead-letters a missing head on its next step
            log.error("backlog entry missing receiver_id=%s seq=%d", job.receiver_id, job.seq)
            self._forget(job)
            return None
        if self.tracing.enabled:
            outcome = await self._traced_post(job, entries, batching)
        else:
            outcome = await self._post(job, entries, batching)
        if not outcome.transform:  # a transform's cancel or failure made no attempt: counted as a transform
            _log_outcome(job, outcome)
            self._count(job, outcome, entries, "batch" if batching else "message")
        return outcome

    def _count(self, job: Job, outcome: Outcome, entries: list[dict[str, Any]], kind: str) -> None:
        """The attempt, and on a 2xx each message's time from accepted to delivered."""
        label = outcome_label(outcome, job.config.retry)
        self.counts.attempt(label, job.lane, kind, outcome.latency_ms / 1000)
        if outcome.ok:
            observe, at = self.counts.latency_seconds.observe, outcome.at
            for entry in entries:
                accepted = entry.get("accepted_at") or at
                observe(at - accepted if at > accepted else 0.0)

    async def _traced_post(self, job: Job, entries: list[dict[str, Any]], batching: bool) -> Outcome:
        """The POST in a client span, child of the trace the (first) message came with."""
        first = entries[0]
        attributes = {"webhook.receiver_id": job.receiver_id, "webhook.message_id": first["id"],
                      "webhook.seq": first["seq"], "webhook.attempt": job.attempt,
                      "webhook.lane": str(job.lane), "webhook.batch_size": len(entries)}
        held_back: NotSent | None = None
        with self.tracing.span("webhook.deliver", "client", first.get("traceparent"), attributes) as span:
            wanted = self.trace_receivers
            extra = None
            if wanted and ("*" in wanted or job.receiver_id in wanted):
                extra = {"traceparent": self.tracing.traceparent() or ""}
            try:
                outcome = await self._post(job, entries, batching, extra)
            except NotSent as exc:  # no attempt was made: raised past the span, which did not fail
                span.set_attribute("webhook.outcome", "held_back")
                held_back = exc
            else:
                span.set_attribute("webhook.outcome", outcome_label(outcome, job.config.retry))
                span.set_attribute("webhook.latency_ms", outcome.latency_ms)
                if outcome.status is not None:
                    span.set_attribute("http.response.status_code", outcome.status)
                if not outcome.ok:
                    self.tracing.failed(span, outcome.error or f"HTTP {outcome.status}")
        if held_back is not None:
            raise held_back
        return outcome

    async def _probe(self, job: Job) -> Outcome:
        """A probe of an open circuit, or (job.heartbeat >= 0) a heartbeat of an idle receiver."""
        kind = "heartbeat" if job.heartbeat >= 0 else "probe"
        gate = partial(self.may_post, job.partition)
        if kind == "heartbeat":
            outcome = await self._post_heartbeat(job.receiver_id, job.token, job.config, job.heartbeat, gate)
        else:
            outcome = await self._post_ping(job.receiver_id, job.token, job.config, gate)
        outcome = evolve(outcome, attempt=job.attempt)
        self.counts.attempt(outcome_label(outcome), job.lane, kind, outcome.latency_ms / 1000)
        quiet = kind == "heartbeat" and outcome.ok  # one a minute from each of thousands: not news
        log.log(
            logging.DEBUG if quiet else logging.INFO,
            "%s receiver_id=%s number=%d lane=%s status=%s error=%s",
            kind, job.receiver_id, job.attempt, job.lane, outcome.status, outsider_text(outcome.error),
        )
        return outcome

    def _held_back(self, job: Job) -> None:
        log.info("receiver_id=%s seq=%s attempt=%d not posted: ownership in doubt",
                 job.receiver_id, job.seq, job.attempt)
        self._forget(job)

    def _forget(self, job: Job) -> None:
        """Give up on a job the actor will never hear of: free its slot and wake the receiver."""
        if self._current(job):
            self._remove(job)
            self._on_lost_outcome(job.receiver_id, job.partition)

    async def _report(self, job: Job, outcome: Outcome, what: str) -> None:
        """Send the outcome to the actor, a few times if need be.

        Should every send fail, the actor never learns of this attempt: the slot
        is freed and the receiver woken, so the attempt is made again (same seq
        and attempt number; a late copy of this outcome is then ignored as stale).
        """
        delay = self._report_backoff
        for tries in range(1, REPORT_TRIES + 1):
            try:
                await self._send_outcome(job.receiver_id, job.partition, outcome)
                return
            except Exception:
                log.warning(
                    "could not report outcome receiver_id=%s %s attempt=%d (try %d of %d)",
                    job.receiver_id, what, outcome.attempt, tries, REPORT_TRIES, exc_info=True,
                )
            if tries < REPORT_TRIES:
                await asyncio.sleep(delay)
                delay *= 2
        if self._current(job):
            log.error("outcome lost receiver_id=%s %s attempt=%d: the attempt will be made again",
                      job.receiver_id, what, outcome.attempt)
            self._forget(job)

    async def _post_ping(
        self, receiver_id: str, token: str, config: ReceiverConfig, gate: Gate | None = None
    ) -> Outcome:
        started = self._clock()
        ping_id = new_id("ping")
        body = build_ping(receiver_id, started)
        headers = build_ping_headers(config, ping_id, body, started)
        outcome = await self._timed_post(token, config, headers, body, 0, ping_id, gate=gate)
        return evolve(outcome, probe=True)

    async def _post_heartbeat(
        self, receiver_id: str, token: str, config: ReceiverConfig, last_seq: int, gate: Gate | None = None
    ) -> Outcome:
        started = self._clock()
        heartbeat_id = new_id("heartbeat")
        body = build_heartbeat(receiver_id, last_seq, started)
        headers = build_ping_headers(config, heartbeat_id, body, started, "webhook.heartbeat")
        outcome = await self._timed_post(token, config, headers, body, 0, heartbeat_id, gate=gate)
        return evolve(outcome, probe=True, heartbeat=True)

    async def _post(
        self, job: Job, entries: list[dict[str, Any]], batching: bool, extra: dict[str, str] | None = None
    ) -> Outcome:
        first = entries[0]
        if job.config.transform is not None and not batching:  # a receiver that batches has none
            return await self._post_transformed(job, first, extra)
        last = entries[-1]["seq"] if batching else 0
        msg_id = batch_id(job.receiver_id, first["seq"], last) if batching else first["id"]
        try:
            if batching:
                body = build_batch_body(entries)
                headers = build_batch_headers(job.config, entries, body, self._clock())
            else:
                body = build_body(first)
                headers = build_headers(job.config, first, body, self._clock())
            if extra:  # not signed: the signature covers the id, the timestamp and the body
                headers = {**headers, **extra}
        except Exception as exc:
            log.exception("cannot build request msg_id=%s seq=%s", msg_id, first.get("seq"))
            error = f"internal: {exc}"
            return Outcome(first["seq"], msg_id, job.token, False, None, error, 0.0, self._clock(),
                           attempt=job.attempt, last=last)
        return await self._timed_post(
            job.token, job.config, headers, body, first["seq"], msg_id, job.attempt, last,
            gate=partial(self.may_post, job.partition),
        )

    async def _post_transformed(
        self, job: Job, entry: dict[str, Any], extra: dict[str, str] | None
    ) -> Outcome:
        """The message as the receiver's transform shapes it: posted, or settled without a POST.

        A failure is the template's (or its result's), the same at every attempt: the
        actor dead-letters the message as `transform_error` at once.
        """
        now = self._clock()
        try:
            shaped = await self._shape(job.config, entry, now)
            request = None if shaped.cancel else build_transformed(job.config, entry, shaped, now)
        except TransformError as exc:
            self.counts.transform(FAILED)
            log.warning("transform failed msg_id=%s receiver_id=%s seq=%s attempt=%d: %s: %s",  # payload text
                        entry["id"], job.receiver_id, entry["seq"], job.attempt, one_line(exc.field),
                        one_line(exc.message))
            return self._unposted(job, entry, FAILED, f"{exc.field}: {exc.message}")
        if request is None:
            self.counts.transform(CANCELLED)
            log.info("cancelled by the transform msg_id=%s receiver_id=%s seq=%s attempt=%d",
                     entry["id"], job.receiver_id, entry["seq"], job.attempt)
            return self._unposted(job, entry, CANCELLED, "cancelled by the receiver's transform")
        url, body, headers = request
        if extra:
            headers = {**headers, **extra}
        outcome = await self._timed_post(
            job.token, job.config, headers, body, entry["seq"], entry["id"], job.attempt, url=url,
            gate=partial(self.may_post, job.partition),
        )
        self.counts.transform("ok")  # counted once its request went: one held back (NotSent) is run again
        return outcome

    async def _shape(self, config: ReceiverConfig, entry: dict[str, Any], now: float) -> Transformed:
        """Run the transform on the loop with a tenth of its budget; past that, again in a thread.

        json-e holds the GIL while it runs, but a thread gives it up every switch interval, so the
        loop keeps serving every other receiver while a heavy template takes its whole budget.
        """
        try:
            return transform_entry(config, entry, now, inline_budget())
        except TransformError as exc:
            if not exc.spent:
                raise
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._transform_pool, transform_entry, config, entry, now)

    def _unposted(self, job: Job, entry: dict[str, Any], transform: str, error: str) -> Outcome:
        return Outcome(entry["seq"], entry["id"], job.token, False, None, error, 0.0, self._clock(),
                       attempt=job.attempt, transform=transform)

    async def _timed_post(
        self, token: str, config: ReceiverConfig, headers: dict[str, str], body: bytes, seq: int, msg_id: str,
        attempt: int = 0, last: int = 0, url: str = "", gate: Gate | None = None,
    ) -> Outcome:
        """The request and what came of it; NotSent (raised) if `gate` held it back."""
        timer = time.perf_counter()  # the latency from a clock that never steps (the wall clock may)
        status: int | None = None
        error: str | None = None
        prefix = b""
        resp_headers: dict[str, str] = {}
        try:
            resp = await self._requests.send("POST", config, headers, body, url, gate)
            status, resp_headers, prefix = resp.status, resp.headers, resp.body_prefix
        except DeliveryError as exc:
            error = str(exc)
        except NotSent:
            raise
        except Exception as exc:
            log.exception("delivery failed msg_id=%s seq=%s", msg_id, seq)
            error = f"internal: {type(exc).__name__}: {exc}"
        finished = self._clock()
        return Outcome(
            seq=seq,
            msg_id=msg_id,
            token=token,
            ok=status is not None and 200 <= status < 300,
            status=status,
            error=error,
            latency_ms=(time.perf_counter() - timer) * 1000,
            at=finished,
            body_prefix=prefix[:1024].decode("utf-8", "replace"),
            headers=resp_headers,
            attempt=attempt,
            last=last,
        )


@lru_cache(maxsize=4096)
def host_of(url: str) -> str:
    """The host whose slots an attempt takes (parsed once per URL, not once per attempt)."""
    return (urlsplit(url).hostname or "").lower()


def _log_outcome(job: Job, outcome: Outcome) -> None:
    seqs = f"{outcome.seq}-{outcome.last}" if outcome.last else str(outcome.seq)
    if outcome.ok:
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "delivered msg_id=%s receiver_id=%s seq=%s attempt=%d lane=%s status=%s",
                outcome.msg_id, job.receiver_id, seqs, job.attempt, job.lane, outcome.status,
            )
        return
    log.warning(
        "attempt failed msg_id=%s receiver_id=%s seq=%s attempt=%d lane=%s status=%s error=%s",
        outcome.msg_id, job.receiver_id, seqs, job.attempt, job.lane, outcome.status,
        outsider_text(outcome.error),
    )
