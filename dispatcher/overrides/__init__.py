"""Everything the worker changes inside faust-streaming, aiokafka and rocksdict, and why.

Nothing outside this package touches a private name of those packages, and
every name used here is listed in `manifest.py`, checked against the
installed versions (which pyproject.toml pins) by
`tests/unit/test_overrides_guard.py`. Module by module (the docstrings hold
the details and the figures):

- `consumer.py`: Faust's consumer loop (`_drain_messages`, a copy), its
  commit offset (`_new_offset`) and seeks. Faust acks a jump in offsets as a
  gap and can hand over records fetched before a seek (kill -9 chaos runs
  lost accepted messages); a commit could pass the offset right after the
  committed one (one message lost after a restart). Records of the actor's
  topics are applied in the loop itself: Faust's conductor, stream and event
  per record cost more than half again the worker's CPU per delivery
  (docs/benchmarks.md, "The record path").
- `highwaters.py`: a changelog's end is read from a fetch too, on every
  broker. The embedded broker's ListOffsets stops at the last batch's base
  offset: table recovery stopped short, and 8 seqs were reused in 6 kill -9
  cycles.
- `fetcher.py`: aiokafka's fetch wait, adapted after every response. Faust
  hardcodes 1,500 ms; the embedded broker does not answer a fetch early, so
  that wait was every Kafka hop's latency, and a starved fetch of a large
  changelog never came back with records.
- `leave.py`: a clean stop leaves the consumer group from generation 0 too.
  aiokafka leaves only from generation 1 up (Kafka's first); the embedded
  broker's first is 0, so the next worker waited out the stopped one's
  session (a restart gap of 11 s with a 6 s session, 3 s after a leave).
- `resume.py`: a static member (an instance id) that stops cleanly hands its
  membership to its restart, which resumes it instead of joining when the
  broker proves it still stands (a DescribeGroups, then a heartbeat): on the
  embedded broker, for a worker alone in its group, that skips the broker's
  fixed 6 s of static join and sync (`dispatcher/membership.py` is the pure
  part and says what counts as proof).
- `producer.py`: a producer flush that waits for every buffered send. Faust's
  gives up after 100 ms, and offsets were committed ahead of changelog writes.
- `store.py`: the RocksDB store's per-partition handles and aiokafka's
  producer, for the actor table's own changelog writer (Faust's key-by-key
  writes were most of the CPU per delivery), and RocksDB without its WAL.
- `app.py`: Faust's factories for the above, a table manager without a
  one-second nap at every start, and a worker without the spinner that set
  the root logger to DEBUG (more CPU than the actor) and without mode's
  one-second nap at the end of every stop.
"""
