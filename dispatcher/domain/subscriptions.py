"""Which receivers an event goes to: subscription patterns and their index.

Event types are dot-separated segments (`payment.card.succeeded`). A pattern
is an exact type, or has `*` segments: a `*` inside matches exactly one
segment (`payment.*.succeeded`), a trailing `*` matches one or more
(`payment.*` gets `payment.refunded` and `payment.card.succeeded`), and `*`
alone matches every type. A subscription may be scoped to a tenant: it then
gets only that tenant's events, while an unscoped one gets every tenant's.

The index is a trie over segments, so matching an event walks at most a few
nodes per segment whatever the number of receivers; each node keeps its
receiver ids per tenant, so a tenant's event never looks at other tenants'.
A receiver may also have a content filter (filters.py): the index keeps it
compiled (one compilation per distinct filter) and `match` runs it over the
event's document for the receivers whose patterns matched.
"""

from __future__ import annotations

import re
import weakref
from collections import Counter
from collections.abc import Iterable
from typing import Any

import orjson

from .errors import InvalidInput
from .filters import Document, Filter, compile_filter

STAR = "*"
MAX_PATTERNS = 256
_SEGMENT_RE = re.compile(r"[A-Za-z0-9_:-]{1,128}")
_TENANT_RE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")

Pattern = tuple[str, ...]


def parse_pattern(value: object, field_name: str) -> Pattern:
    """`payment.*` -> ("payment", "*"); the error names `field_name`."""
    if not isinstance(value, str) or not 0 < len(value) <= 256:
        raise InvalidInput(field_name, "must be an event type or pattern of 1..256 characters")
    segments = tuple(value.split("."))
    for segment in segments:
        if segment != STAR and not _SEGMENT_RE.fullmatch(segment):
            raise InvalidInput(
                field_name, "segments are [A-Za-z0-9_:-]+ or *, separated by single dots (e.g. payment.*)"
            )
    return segments


def parse_patterns(value: object, field_name: str) -> tuple[str, ...]:
    """A receiver's `event_types`: a list of patterns (empty: every type)."""
    if not isinstance(value, list) or len(value) > MAX_PATTERNS:
        raise InvalidInput(field_name, f"must be a list of at most {MAX_PATTERNS} event types or patterns")
    return tuple(".".join(parse_pattern(p, f"{field_name}[{i}]")) for i, p in enumerate(value))


def check_tenant(value: object, field_name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _TENANT_RE.fullmatch(value):
        raise InvalidInput(field_name, "must be 1..128 characters of [A-Za-z0-9_.:-]")
    return value


def matches(pattern: Pattern, event_type: str) -> bool:
    """One pattern against one type (the index's rule, for tests and single checks)."""
    segments = event_type.split(".")
    for i, part in enumerate(pattern):
        if part == STAR and i == len(pattern) - 1:
            return len(segments) > i
        if i >= len(segments) or (part != STAR and part != segments[i]):
            return False
    return len(segments) == len(pattern)


Shape = tuple[tuple[Pattern, ...], str | None]  # a receiver's patterns and tenant
EVERYTHING: Shape = (((STAR,),), None)  # no patterns, no tenant: every event (the default)


class _Node:
    __slots__ = ("children", "exact", "star", "tail")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.star: _Node | None = None  # a `*` segment inside a pattern
        self.exact: dict[str | None, set[bytes]] = {}  # tenant -> receivers whose pattern ends here
        self.tail: dict[str | None, set[bytes]] = {}  # tenant -> receivers whose pattern ends in `*` here

    def empty(self) -> bool:
        return not (self.children or self.star or self.exact or self.tail)


class SubscriptionIndex:
    """Receiver ids by pattern and tenant; `match` is independent of how many subscribe.

    Ids are held as UTF-8 bytes, 16 bytes a receiver less than a str of an ASCII id: every
    worker holds every receiver's subscription, and `match` decodes only the ids it returns.
    """

    def __init__(self) -> None:
        self._root = _Node()
        # Receivers of every other shape. One of `EVERYTHING` is a member of the root's untenanted
        # tail set and nothing more: a dict entry each would grow with the receivers.
        self._subscriptions: dict[bytes, Shape] = {}
        self._everything = 0  # receivers of shape EVERYTHING
        # One copy of each distinct (patterns, tenant): receivers mostly share a few, and at a
        # million receivers a tuple of tuples each would cost more than the rest of the entry.
        self._shapes: dict[Shape, Shape] = {}
        # Compiled filters of the receivers that have one; receivers with the same filter share it.
        self._filters: dict[bytes, Filter] = {}
        self._compiled: weakref.WeakValueDictionary[bytes, Filter] = weakref.WeakValueDictionary()
        self._per_tenant: Counter[str | None] = Counter()  # receivers of each tenant (None: untenanted)

    def __len__(self) -> int:
        return len(self._subscriptions) + self._everything

    def __contains__(self, receiver_id: str) -> bool:
        key = receiver_id.encode()
        return key in self._subscriptions or key in self._root.tail.get(None, ())

    def tenants(self) -> int:
        """How many tenants have receivers, the untenanted ones counting as one."""
        return len(self._per_tenant)

    def tenant_of(self, receiver_id: str) -> tuple[str | None] | None:
        """(the receiver's tenant,) for a subscribed receiver; None for an id the index does not hold."""
        key = receiver_id.encode()
        shape = self._subscriptions.get(key)
        if shape is not None:
            return (shape[1],)
        return (None,) if key in self._root.tail.get(None, ()) else None

    def put(self, receiver_id: str, patterns: Iterable[str], tenant: str | None = None,
            content_filter: dict[str, Any] | None = None) -> None:
        """Subscribe (or re-subscribe) a receiver; no patterns means every type.

        `content_filter` is validated JSON (a receiver's stored filter); it is compiled here.
        """
        key = receiver_id.encode()
        compiled = self._compile(content_filter) if content_filter else None
        self._remove(key)
        if compiled is not None:
            self._filters[key] = compiled
        parsed = tuple(dict.fromkeys(tuple(p.split(".")) for p in patterns)) or ((STAR,),)
        self._per_tenant[tenant] += 1
        if (parsed, tenant) == EVERYTHING:
            self._root.tail.setdefault(None, set()).add(key)
            self._everything += 1
            return
        shape = self._shapes.setdefault((parsed, tenant), (parsed, tenant))
        self._subscriptions[key] = shape
        parsed = shape[0]
        for pattern in parsed:
            node, last = self._root, len(pattern) - 1
            for i, part in enumerate(pattern):
                if part == STAR and i == last:
                    node.tail.setdefault(tenant, set()).add(key)
                    break
                if part == STAR:
                    node.star = node.star or _Node()
                    node = node.star
                else:
                    node = node.children.setdefault(part, _Node())
            else:
                node.exact.setdefault(tenant, set()).add(key)

    def _compile(self, content_filter: dict[str, Any]) -> Filter:
        canonical = orjson.dumps(content_filter, option=orjson.OPT_SORT_KEYS)
        compiled = self._compiled.get(canonical)
        if compiled is None:  # one this version cannot compile takes every event (as at intake)
            compiled = self._compiled[canonical] = compile_filter(content_filter, accept_invalid=True)
        return compiled

    @property
    def filtered(self) -> int:
        """Receivers that have a content filter."""
        return len(self._filters)

    def remove(self, receiver_id: str) -> None:
        self._remove(receiver_id.encode())

    def _remove(self, key: bytes) -> None:
        self._filters.pop(key, None)
        entry = self._subscriptions.pop(key, None)
        if entry is None:
            if key in self._root.tail.get(None, ()):
                _discard(self._root.tail, None, key)
                self._everything -= 1
                self._forget_one(None)
            return
        patterns, tenant = entry
        self._forget_one(tenant)
        for pattern in patterns:
            self._unlink(self._root, pattern, 0, key, tenant)

    def _forget_one(self, tenant: str | None) -> None:
        left = self._per_tenant[tenant] - 1
        if left:
            self._per_tenant[tenant] = left
        else:
            del self._per_tenant[tenant]

    def _unlink(self, node: _Node, pattern: Pattern, i: int, key: bytes, tenant: str | None) -> None:
        part = pattern[i]
        if part == STAR and i == len(pattern) - 1:
            _discard(node.tail, tenant, key)
            return
        child = node.star if part == STAR else node.children.get(part)
        if child is None:
            return
        if i == len(pattern) - 1:
            _discard(child.exact, tenant, key)
        else:
            self._unlink(child, pattern, i + 1, key, tenant)
        if child.empty():  # prune, so unsubscribing leaves no garbage
            if part == STAR:
                node.star = None
            else:
                del node.children[part]

    def match(self, event_type: str, tenant: str | None = None, document: Document | None = None) -> set[str]:
        """Receivers an event of `event_type` (from `tenant`) goes to.

        With the event's `document` (filters.document), receivers whose filter refuses it are left
        out; without one, filters are not looked at.
        """
        return self.match_counted(event_type, tenant, document)[0]

    def match_counted(
        self, event_type: str, tenant: str | None = None, document: Document | None = None
    ) -> tuple[set[str], int]:
        """`match`, and how many receivers of the type a content filter left out."""
        tenants = (None,) if tenant is None else (None, tenant)
        found: set[bytes] = set()
        segments = event_type.split(".")
        frontier = [self._root]
        for segment in segments:
            following: list[_Node] = []
            for node in frontier:
                for t in tenants:
                    found.update(node.tail.get(t, ()))
                child = node.children.get(segment)
                if child is not None:
                    following.append(child)
                if node.star is not None:
                    following.append(node.star)
            frontier = following
            if not frontier:
                break
        for node in frontier:
            for t in tenants:
                found.update(node.exact.get(t, ()))
        if document is not None and self._filters:
            taken = self._accepting(found, document)
            return {key.decode() for key in taken}, len(found) - len(taken)
        return {key.decode() for key in found}, 0

    def _accepting(self, keys: set[bytes], document: Document) -> list[bytes]:
        """The receivers whose filter (if any) takes the document; a shared filter runs once."""
        filters = self._filters
        verdicts: dict[Filter, bool] = {}
        taken: list[bytes] = []
        for key in keys:
            compiled = filters.get(key)
            if compiled is not None:
                verdict = verdicts.get(compiled)
                if verdict is None:
                    verdict = verdicts[compiled] = compiled.accepts(document)
                if not verdict:
                    continue
            taken.append(key)
        return taken


def _discard(sets: dict[str | None, set[bytes]], tenant: str | None, key: bytes) -> None:
    members = sets.get(tenant)
    if members is not None:
        members.discard(key)
        if not members:
            del sets[tenant]


def encode_subscription(event_types: Iterable[str], tenant: str | None,
                        content_filter: dict[str, Any] | None = None) -> bytes:
    """The subscriptions-topic record of one receiver (keyed by its id); the filter only when set."""
    record: dict[str, Any] = {"event_types": list(event_types), "tenant": tenant}
    if content_filter:
        record["filter"] = content_filter
    return orjson.dumps(record)


Subscription = tuple[tuple[str, ...], str | None, dict[str, Any] | None]


def decode_subscription(raw: bytes | None) -> Subscription | None:
    """(patterns, tenant, filter), or None for a tombstone (the receiver is gone)."""
    if raw is None:
        return None
    data = orjson.loads(raw)
    return tuple(data.get("event_types") or ()), data.get("tenant"), data.get("filter")
