"""What each API sub-command does: one client call (a few for paging), and the view it prints.

Each returns the API's answer when `--json` is given, else what `cli_output.readable`
shows: the answer itself, a `Table`, or `Plain` text (`--quiet`: the new id only).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from .cli_output import Plain, Table, as_json, escape
from .client import DispatcherClient

Command = Callable[[DispatcherClient, argparse.Namespace], Awaitable[Any]]


class UsageError(Exception):
    """Arguments the API was not asked about: exit status 2."""


class NotReady(Exception):
    """The worker answered /readyz with `starting`: exit status 1."""


# receivers -------------------------------------------------------------------------


def receiver_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The body fields of create/update: `--config`, then each `--set`, then the named options."""
    fields: dict[str, Any] = dict(args.config or {})
    fields.update(args.set_fields or [])
    named = {
        "event_types": args.event_types, "tenant": args.tenant, "secret": args.secret,
        "signing": args.signing, "headers": dict(args.headers) if args.headers else None,
        "authorization": args.authorization, "verify": args.verify, "rate_limit": args.rate_limit,
        "batch_max": args.batch_max, "ordering": args.ordering, "max_in_flight": args.max_in_flight,
        "concurrency": args.concurrency, "delivery_control": args.delivery_control,
        "heartbeat_interval": args.heartbeat_interval, "coalesce": args.coalesce,
    }
    fields.update({k: v for k, v in named.items() if v is not None})
    if args.content_filter is not None:
        fields["filter"] = args.content_filter.value  # null too: an update removes the filter
    auth = auth_field(args)
    if auth is not UNSET_AUTH:
        fields["auth"] = auth
    if args.server_ca is not None and args.no_server_ca:
        raise UsageError("--server-ca and --no-server-ca exclude each other")
    if args.server_ca is not None or args.no_server_ca:
        fields["tls"] = {"ca": args.server_ca} if args.server_ca is not None else None
    if getattr(args, "transform", None) is not None:
        fields["transform"] = args.transform.value  # null too: an update removes the transform
    return fields


UNSET_AUTH = object()
_OAUTH2_OPTIONS = {"token_url": "oauth2_token_url", "client_id": "oauth2_client_id",
                   "client_secret": "oauth2_client_secret", "scope": "oauth2_scope",
                   "audience": "oauth2_audience", "client_auth": "oauth2_client_auth"}


def auth_field(args: argparse.Namespace) -> Any:
    """The `auth` the auth options make: an object, None (`--no-auth`), or UNSET_AUTH (none given)."""
    mtls = {"certificate": args.client_cert, "private_key": args.client_key}
    oauth2 = {name: getattr(args, dest) for name, dest in _OAUTH2_OPTIONS.items()}
    given_mtls = {k: v for k, v in mtls.items() if v is not None}
    given_oauth2 = {k: v for k, v in oauth2.items() if v is not None}
    if sum(map(bool, (given_mtls, given_oauth2, args.no_auth))) > 1:
        raise UsageError("--no-auth, the --client-* options and the --oauth2-* options exclude each other")
    if args.no_auth:
        return None
    if given_mtls:
        return {"type": "mtls", **given_mtls}
    if given_oauth2:
        return {"type": "oauth2", **given_oauth2}
    return UNSET_AUTH


def receiver_view(answer: dict[str, Any]) -> dict[str, Any]:
    """A receiver for reading: an empty `event_types` means every type, so say so."""
    if answer.get("event_types") == []:
        return {**answer, "event_types": "* (every type)"}
    return answer


def _shown(args: argparse.Namespace, answer: dict[str, Any]) -> Any:
    """The answer as `--json`, `--quiet` (its id; a new secret on stderr) or readable output want it."""
    if getattr(args, "quiet", False):
        _keep_new_secret(args, answer)
        return Plain(answer["id"])
    if args.json:
        return answer
    if "secret" in answer:  # an ed25519 receiver needs only its public key, which is not secret
        print("note: the secret is shown only in this answer; keep it", file=sys.stderr)
    return receiver_view(answer)


def _keep_new_secret(args: argparse.Namespace, answer: dict[str, Any]) -> None:
    """With -q, stdout is the id alone: a secret the API made, shown only in this answer, goes to stderr.

    A secret the caller gave is not repeated; a public key is not shown (`receivers show` has it).
    """
    secret = answer.get("secret")
    if secret is not None and secret != _given_secret(args):
        print(f"secret (shown once, keep it): {escape(str(secret), one_line=True)}", file=sys.stderr)


def _given_secret(args: argparse.Namespace) -> Any:
    if getattr(args, "secret", None) is not None:
        return args.secret
    fields = dict(getattr(args, "config", None) or {})
    fields.update(getattr(args, "set_fields", None) or [])
    return fields.get("secret")


async def create(client: DispatcherClient, args: argparse.Namespace) -> Any:
    fields = {**receiver_fields(args), "url": args.url}
    if args.id is not None:
        fields["id"] = args.id
    return _shown(args, await client.create_receiver(**fields))


async def update(client: DispatcherClient, args: argparse.Namespace) -> Any:
    fields = receiver_fields(args)
    if args.url is not None:
        fields["url"] = args.url
    if not fields:
        raise UsageError("receivers update: name at least one field to change (see --help)")
    return _shown(args, await client.update_receiver(args.receiver_id, **fields))


async def list_receivers(client: DispatcherClient, args: argparse.Namespace) -> Any:
    found: list[dict[str, Any]] = []
    cursor = None
    disabled = None if args.disabled is None else args.disabled == "true"
    while True:
        page = await client.list_receivers(
            tenant=args.tenant, event_type=args.event_type, status=args.status, disabled=disabled,
            search=args.search, cursor=cursor, limit=args.page,
        )
        found += page["receivers"]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    if args.json:
        return {"receivers": found}
    rows = [{**r, "event_types": r["event_types"] or ["*"]} for r in found]
    return Table(rows, ["id", "status", "backlog", "tenant", "event_types", "url"])


async def show(client: DispatcherClient, args: argparse.Namespace) -> Any:
    return _shown(args, await client.get_receiver(args.receiver_id))


async def state(client: DispatcherClient, args: argparse.Namespace) -> Any:
    return await client.receiver_state(args.receiver_id)


async def delete(client: DispatcherClient, args: argparse.Namespace) -> Any:
    return await client.delete_receiver(args.receiver_id)


async def control(client: DispatcherClient, args: argparse.Namespace) -> Any:
    """pause, resume, enable or disable (the sub-command's name)."""
    return _shown(args, await client.control(args.receiver_id, args.action, args.reason))


async def rotate_secret(client: DispatcherClient, args: argparse.Namespace) -> Any:
    answer = await client.rotate_secret(
        args.receiver_id, grace_seconds=args.grace_seconds, signing=args.signing, secret=args.secret
    )
    return _shown(args, answer)


async def transform_test(client: DispatcherClient, args: argparse.Namespace) -> Any:
    template = args.transform.value if args.transform is not None else None
    headers = dict(args.headers) if args.headers else None
    return await client.transform_test(
        args.receiver_id, args.payload, event_type=args.event_type, headers=headers, transform=template
    )


async def verify(client: DispatcherClient, args: argparse.Namespace) -> Any:
    return _shown(args, await client.verify(args.receiver_id))


async def ping(client: DispatcherClient, args: argparse.Namespace) -> Any:
    return await client.ping(args.receiver_id)


async def attempts(client: DispatcherClient, args: argparse.Namespace) -> Any:
    found = await client.attempts(args.receiver_id, args.limit)
    return {"attempts": found} if args.json or found else Plain("no attempt yet")


async def last_response(client: DispatcherClient, args: argparse.Namespace) -> Any:
    answer = await client.last_response(args.receiver_id)
    return answer if args.json or answer is not None else Plain("no attempt yet")


async def events(client: DispatcherClient, args: argparse.Namespace) -> Any:
    """One page of the catch-up; readable output says how to ask for the next one."""
    answer = await client.receiver_events(args.receiver_id, args.after_seq, args.limit)
    if args.json:
        return answer
    found = answer["events"]
    if not found:
        return Plain(f"no messages above seq {args.after_seq} (settled ones are kept "
                     f"{answer['retained_seconds']:g} s)")
    after = answer["next_after_seq"]
    if after is not None:
        print(f"more: receivers events {args.receiver_id} --after-seq {after}", file=sys.stderr)
    return {"events": found}


async def reset_state(client: DispatcherClient, args: argparse.Namespace) -> Any:
    if not args.confirm:
        raise UsageError(
            "receivers reset-state dead-letters the backlog and drops counters and history: add --confirm"
        )
    return await client.reset_receiver_state(args.receiver_id)


# messages and events -----------------------------------------------------------------


async def send(client: DispatcherClient, args: argparse.Namespace) -> Any:
    headers = dict(args.headers) if args.headers else None
    answer = await client.send_message(args.receiver_id, args.event_type, args.payload, id=args.id,
                                       headers=headers, ordering_key=args.ordering_key)
    return Plain(answer["id"]) if args.quiet else answer


async def send_batch(client: DispatcherClient, args: argparse.Namespace) -> Any:
    ids = await client.send_messages(args.messages)
    if args.quiet:
        return Plain("\n".join(ids))
    return {"ids": ids} if args.json else {"accepted": len(ids), "ids": ids}


async def message_status(client: DispatcherClient, args: argparse.Namespace) -> Any:
    return await client.message_status(args.receiver_id, args.message_id)


async def publish(client: DispatcherClient, args: argparse.Namespace) -> Any:
    answer = await client.publish_event(args.event_type, args.payload, tenant=args.tenant, id=args.id,
                                        ordering_key=args.ordering_key)
    return Plain(answer["id"]) if args.quiet else answer


# dead letters ------------------------------------------------------------------------


async def list_letters(client: DispatcherClient, args: argparse.Namespace) -> Any:
    answer = await client.dead_letters(args.receiver_id, args.after_seq, args.limit)
    if args.json:
        return answer
    after = answer["next_after_seq"]
    if after is not None:
        print(f"more: dead-letters list {args.receiver_id} --after-seq {after}", file=sys.stderr)
    columns = ["seq", "msg_id", "reason", "attempts", "last_status", "last_error", "at", "detail"]
    return Table(answer["dead_letters"], columns)


async def replay(client: DispatcherClient, args: argparse.Namespace) -> Any:
    """Replay the dead letters there are when it starts, a page at a time; show progress.

    Replays that fail again are new dead letters (new seqs, later times): the pages and the
    newest dead-letter time are fixed first, so a replay is never replayed by the same command.
    """
    pages, newest = await _letter_pages(client, args)
    replayed = skipped = 0
    for first, last in pages:
        done = await client.replay(args.receiver_id, from_seq=first, to_seq=last, until=newest,
                                   limit=args.page)
        replayed += done["replayed"]
        skipped += len(done["skipped_seqs"])
        print(f"replayed {replayed} (seq {first}..{last}), skipped {skipped}", file=sys.stderr, flush=True)
    return {"receiver_id": args.receiver_id, "replayed": replayed, "skipped": skipped, "pages": len(pages)}


async def resend(client: DispatcherClient, args: argparse.Namespace) -> Any:
    return await client.resend(args.receiver_id, args.message_id, id=args.id)


async def recover(client: DispatcherClient, args: argparse.Namespace) -> Any:
    """Recover page by page, `until` fixed by the first answer; progress on stderr."""
    page = await client.recover(args.receiver_id, args.since, until=args.until, limit=args.page)
    recovered, skipped, scanned, pages = 0, 0, 0, 0
    while True:
        recovered += page["recovered"]
        skipped += len(page["skipped_seqs"])
        scanned += page["scanned"]
        pages += 1
        after = page["next_after_seq"]
        through = f" through seq {after}" if after is not None else ""
        print(f"recovered {recovered}, skipped {skipped}, {scanned} dead letters read{through}",
              file=sys.stderr, flush=True)
        if after is None:
            break
        page = await client.recover(args.receiver_id, page["since"], until=page["until"], after_seq=after,
                                    limit=args.page)
    return {"receiver_id": args.receiver_id, "recovered": recovered, "skipped": skipped,
            "scanned": scanned, "pages": pages}


async def _letter_pages(
    client: DispatcherClient, args: argparse.Namespace
) -> tuple[list[tuple[int, int]], float]:
    """The seq range of each page of the dead letters in the asked range now, and the newest one's time."""
    pages: list[tuple[int, int]] = []
    newest = 0.0
    after: int | None = args.from_seq - 1
    while after is not None:
        answer = await client.dead_letters(args.receiver_id, after, args.page)
        page = [x for x in answer["dead_letters"] if args.to_seq is None or x["seq"] <= args.to_seq]
        if not page:
            break
        pages.append((page[0]["seq"], page[-1]["seq"]))
        newest = max(newest, *(x["at"] for x in page))
        after = answer["next_after_seq"]
    return pages, newest


# tenant tokens -------------------------------------------------------------------------

TOKEN_COLUMNS = ["id", "tenant", "name", "status", "last4", "created_at", "expires_at", "revoked_at"]


async def create_token(client: DispatcherClient, args: argparse.Namespace) -> Any:
    answer = await client.create_token(args.tenant, name=args.name, expires_at=args.expires_at)
    if args.quiet:
        return Plain(answer["token"])
    if not args.json:
        print("note: the token is shown only in this answer; keep it", file=sys.stderr)
    return answer


async def list_tokens(client: DispatcherClient, args: argparse.Namespace) -> Any:
    tokens = await client.list_tokens(tenant=args.tenant)
    return {"tokens": tokens} if args.json else Table(tokens, TOKEN_COLUMNS)


async def revoke_token(client: DispatcherClient, args: argparse.Namespace) -> Any:
    return await client.revoke_token(args.token_id)


# the worker ----------------------------------------------------------------------------


async def health(client: DispatcherClient, args: argparse.Namespace) -> Any:
    return await client.health()


async def ready(client: DispatcherClient, args: argparse.Namespace) -> Any:
    answer = await client.ready()
    if answer.get("status") != "ready":
        raise NotReady(f"the worker is {answer.get('status')}, not ready")
    return answer


async def openapi(client: DispatcherClient, args: argparse.Namespace) -> Any:
    answer = await client.openapi()
    return answer if args.json else Plain(as_json(answer))  # a document is read as JSON, or by tools
