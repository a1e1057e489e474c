"""CLI sub-commands over the HTTP API: receivers, send, events, dead-letters.

They talk to `DISPATCHER_URL` (default http://127.0.0.1:8080) with
`DISPATCHER_API_TOKEN`; `--json` prints the API's answer as is, otherwise a
short readable form. Exit status: 0 done, 1 the API refused (its error is
printed), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from .client import ApiError, DispatcherClient

Command = Callable[[DispatcherClient, argparse.Namespace], Awaitable[Any]]


def add_api_commands(sub: Any) -> None:
    receivers = sub.add_parser("receivers", help="create, show, change or delete receivers").add_subparsers(
        dest="action", required=True
    )
    create = _api(receivers.add_parser("create", help="create a receiver (replace one: --id)"), _create)
    create.add_argument("url")
    create.add_argument("--id")
    create.add_argument("--event-type", action="append", dest="event_types", help="pattern; repeat for more")
    create.add_argument("--tenant")
    listing = _api(receivers.add_parser("list", help="receivers in id order, every page"), _list_receivers)
    for flag in ("--tenant", "--event-type", "--status"):
        listing.add_argument(flag)
    listing.add_argument("--disabled", choices=["true", "false"])
    listing.add_argument("--page", type=int, default=500, help="receivers per call")
    for action, run in (("show", _show), ("state", _state), ("delete", _delete)):
        _api(receivers.add_parser(action, help=f"{action} a receiver"), run).add_argument("receiver_id")

    send = _api(sub.add_parser("send", help="send a message to one receiver"), _send)
    send.add_argument("receiver_id")
    send.add_argument("event_type")
    send.add_argument("payload", help="JSON")
    send.add_argument("--id", help="message id (the idempotency key)")

    events = sub.add_parser("events", help="publish events").add_subparsers(dest="action", required=True)
    publish = _api(events.add_parser("publish", help="publish an event to its subscribers"), _publish)
    publish.add_argument("event_type")
    publish.add_argument("payload", help="JSON")
    publish.add_argument("--tenant")
    publish.add_argument("--id", help="event id")

    letters = sub.add_parser("dead-letters", help="list or replay dead letters").add_subparsers(
        dest="action", required=True
    )
    listing = _api(letters.add_parser("list", help="a receiver's dead letters"), _list_letters)
    listing.add_argument("receiver_id")
    listing.add_argument("--after-seq", type=int, default=0)
    listing.add_argument("--limit", type=int, default=100)
    replay = _api(letters.add_parser("replay", help="replay dead letters, a page at a time"), _replay)
    replay.add_argument("receiver_id")
    replay.add_argument("--from-seq", type=int, default=1)
    replay.add_argument("--to-seq", type=int)
    replay.add_argument("--page", type=int, default=1000, help="dead letters per call")


def _api(parser: argparse.ArgumentParser, run: Command) -> argparse.ArgumentParser:
    parser.add_argument("--json", action="store_true", help="print the API's answer as JSON")
    parser.set_defaults(api_command=run)
    return parser


def run_api_command(args: argparse.Namespace) -> int:
    url = os.environ.get("DISPATCHER_URL", "http://127.0.0.1:8080")
    token = os.environ.get("DISPATCHER_API_TOKEN", "")
    if not token:
        print("DISPATCHER_API_TOKEN must be set (the token the worker prints or was given)", file=sys.stderr)
        return 2

    async def go() -> Any:
        async with DispatcherClient(url, token) as client:
            return await args.api_command(client, args)

    try:
        answer = asyncio.run(go())
    except ApiError as exc:
        print(f"error: {exc.status} {exc.code}: {exc.field}: {exc.message}", file=sys.stderr)
        return 1
    except ValueError as exc:  # a payload that is not JSON
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot reach {url}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(orjson.dumps(answer, option=orjson.OPT_INDENT_2).decode())
    else:
        print(_readable(answer))
    return 0


def _readable(answer: Any) -> str:
    if isinstance(answer, dict) and "table" in answer:
        rows, columns = answer["table"], answer["columns"]
        cells = [[c.upper() for c in columns]] + [[str(r.get(c, "")) for c in columns] for r in rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
        return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells)
    if isinstance(answer, dict):
        return "\n".join(f"{k}: {_short(v)}" for k, v in answer.items())
    return str(answer)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    return text if len(text) <= 100 else text[:97] + "..."


def _payload(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"payload is not JSON: {exc}") from exc


async def _create(client: DispatcherClient, args: argparse.Namespace) -> Any:
    fields = {"id": args.id, "event_types": args.event_types, "tenant": args.tenant}
    return await client.create_receiver(args.url, **fields)


async def _list_receivers(client: DispatcherClient, args: argparse.Namespace) -> Any:
    found: list[dict[str, Any]] = []
    cursor = None
    disabled = None if args.disabled is None else args.disabled == "true"
    while True:
        page = await client.list_receivers(
            tenant=args.tenant, event_type=args.event_type, status=args.status, disabled=disabled,
            cursor=cursor, limit=args.page,
        )
        found += page["receivers"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    if args.json:
        return {"receivers": found}
    rows = [{**r, "event_types": ",".join(r["event_types"]) or "*"} for r in found]
    return {"table": rows, "columns": ["id", "status", "backlog", "tenant", "event_types", "url"]}


async def _show(client: DispatcherClient, args: argparse.Namespace) -> Any:
    return await client.get_receiver(args.receiver_id)


async def _state(client: DispatcherClient, args: argparse.Namespace) -> Any:
    return await client.receiver_state(args.receiver_id)


async def _delete(client: DispatcherClient, args: argparse.Namespace) -> Any:
    return await client.delete_receiver(args.receiver_id)


async def _send(client: DispatcherClient, args: argparse.Namespace) -> Any:
    return await client.send_message(args.receiver_id, args.event_type, _payload(args.payload), id=args.id)


async def _publish(client: DispatcherClient, args: argparse.Namespace) -> Any:
    return await client.publish_event(args.event_type, _payload(args.payload), tenant=args.tenant, id=args.id)


async def _list_letters(client: DispatcherClient, args: argparse.Namespace) -> Any:
    answer = await client.dead_letters(args.receiver_id, args.after_seq, args.limit)
    if args.json:
        return answer
    columns = ["seq", "msg_id", "reason", "attempts", "last_status", "detail"]
    return {"table": answer["dead_letters"], "columns": columns}


async def _replay(client: DispatcherClient, args: argparse.Namespace) -> Any:
    """Page through the dead letters (a seq cursor), replaying each page's seq range; show progress."""
    after, replayed, skipped, pages = args.from_seq - 1, 0, 0, 0
    while True:
        page = (await client.dead_letters(args.receiver_id, after, args.page))["dead_letters"]
        page = [x for x in page if args.to_seq is None or x["seq"] <= args.to_seq]
        if not page:
            break
        first, last = page[0]["seq"], page[-1]["seq"]
        done = await client.replay(args.receiver_id, from_seq=first, to_seq=last, limit=args.page)
        replayed += done["replayed"]
        skipped += len(done["skipped_seqs"])
        pages += 1
        print(f"replayed {replayed} (seq {first}..{last}), skipped {skipped}", file=sys.stderr, flush=True)
        after = last
    return {"receiver_id": args.receiver_id, "replayed": replayed, "skipped": skipped, "pages": pages}
