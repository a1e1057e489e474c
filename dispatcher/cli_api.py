"""CLI sub-commands over the HTTP API: receivers, messages, send, events, dead-letters, tokens, the worker.

They talk to `DISPATCHER_URL` (default http://127.0.0.1:8080) with
`DISPATCHER_API_TOKEN`; `--json` prints the API's answer as is, otherwise a
readable form (cli_output.py, which escapes control characters); `--field PATH`
one field of the answer; `-q` on create, send, send-batch and publish only the new
id (and a receiver's new secret on stderr). Exit status: 0 done, 1 the API refused
(its error on stderr), could not be reached or did not answer in `--timeout`, 2 bad
arguments (cli_types.py names the option) or a bad DISPATCHER_URL. `CLI_OPERATIONS`
names the command that calls each API operation; a test holds it to the OpenAPI document.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any, get_args

import aiohttp
import orjson
from yarl import URL

from . import cli_commands as run
from . import cli_types as argtype
from .cli_commands import NotReady, UsageError
from .cli_output import as_json, escape, is_safe, readable
from .client import ApiError, Concurrency, DeliveryControl, DispatcherClient, Ordering

DEFAULT_URL = "http://127.0.0.1:8080"

CLI_OPERATIONS: dict[str, str] = {
    "getHealth": "health",
    "getReady": "ready",
    "getOpenApiDocument": "openapi",
    "listReceivers": "receivers list",
    "createReceiver": "receivers create",
    "getReceiver": "receivers show",
    "updateReceiver": "receivers update",
    "deleteReceiver": "receivers delete",
    "getReceiverState": "receivers state",
    "resetReceiverState": "receivers reset-state",
    "listReceiverEvents": "receivers events",
    "getMessageStatus": "messages status",
    "pingReceiver": "receivers ping",
    "listAttempts": "receivers attempts",
    "getLastResponse": "receivers last-response",
    "listDeadLetters": "dead-letters list",
    "replayDeadLetters": "dead-letters replay",
    "resendMessage": "receivers resend",
    "recoverDeadLetters": "receivers recover",
    "rotateReceiverSecret": "receivers rotate-secret",
    "verifyReceiver": "receivers verify",
    "testReceiverTransform": "receivers transform-test",
    "pauseReceiver": "receivers pause",
    "resumeReceiver": "receivers resume",
    "enableReceiver": "receivers enable",
    "disableReceiver": "receivers disable",
    "sendMessage": "send",
    "sendMessageBatch": "send-batch",
    "publishEvent": "events publish",
    "listTokens": "tokens list",
    "createToken": "tokens create",
    "revokeToken": "tokens revoke",
}

def add_api_commands(sub: Any) -> None:
    _receiver_commands(sub)
    _message_commands(sub)
    _dead_letter_commands(sub)
    _token_commands(sub)
    for name, command, text in (
        ("health", run.health, "is the worker's process alive (GET /healthz)"),
        ("ready", run.ready, "is the worker ready, with its figures; exit 1 while starting (GET /readyz)"),
        ("openapi", run.openapi, "print the API's OpenAPI document"),
    ):
        _api(sub.add_parser(name, help=text, description=text), command)


# receivers -------------------------------------------------------------------------


def _receiver_commands(sub: Any) -> None:
    text = "create, list, show, update, control, inspect or delete receivers"
    receivers = sub.add_parser("receivers", help=text, description=text).add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    create = _api(_parser(receivers, "create", "create a receiver (replace one: --id)"), run.create)
    create.add_argument("url")
    create.add_argument("--id", help="the receiver's id (default: a new one; an existing one is replaced)")
    _receiver_options(create)
    _quiet(create, "the new receiver's id")
    update = _api(_parser(receivers, "update", "change the named fields of a receiver (PATCH)"), run.update)
    update.add_argument("receiver_id", type=argtype.ident)
    update.add_argument("--url")
    _receiver_options(update)

    listing = _api(_parser(receivers, "list", "receivers in id order, every page"), run.list_receivers)
    for flag in ("--tenant", "--event-type", "--status"):
        listing.add_argument(flag)
    listing.add_argument("--search", help="text the id or URL contains")
    listing.add_argument("--disabled", choices=["true", "false"])
    listing.add_argument("--page", type=argtype.positive, default=500, help="receivers per call")
    for action, command, text in (
        ("show", run.show, "a receiver's config and delivery state"),
        ("state", run.state, "the receiver actor's live state, from the worker that owns it"),
        ("delete", run.delete, "dead-letter the backlog and delete the receiver"),
        ("verify", run.verify, "run the endpoint verification handshake again (receivers with verify on)"),
        ("ping", run.ping, "send a webhook.ping now and show the receiver's answer"),
        ("last-response", run.last_response, "the newest delivery attempt, with the receiver's answer"),
    ):
        _api(_parser(receivers, action, text), command).add_argument("receiver_id", type=argtype.ident)
    for action, text in (
        ("pause", "hold deliveries; messages are still taken in"),
        ("resume", "deliver again after a pause"),
        ("enable", "deliver again after a disable"),
        ("disable", "stop delivering (with --reason, shown in its state)"),
    ):
        control = _api(_parser(receivers, action, text), run.control)
        control.add_argument("receiver_id", type=argtype.ident)
        control.add_argument("--reason", default="", help="kept with the receiver's state")
    _inspect_commands(receivers)


def _inspect_commands(receivers: Any) -> None:
    rotate = _api(_parser(receivers, "rotate-secret", "sign with a new secret, shown once; the old one "
                          "also signs during the grace period"), run.rotate_secret)
    rotate.add_argument("receiver_id", type=argtype.ident)
    rotate.add_argument("--grace-seconds", type=argtype.finite,
                        help="seconds the old secret signs too (default 24 h)")
    rotate.add_argument("--signing", type=argtype.signing, help="hmac or ed25519 (default: the current kind)")
    rotate.add_argument("--secret", help="the new secret (default: a new random one)")
    attempts = _api(_parser(receivers, "attempts", "the attempt log, newest first"), run.attempts)
    attempts.add_argument("receiver_id", type=argtype.ident)
    attempts.add_argument("--limit", type=argtype.positive, default=50)
    events = _api(_parser(receivers, "events", "catch-up: the receiver's messages above a seq, "
                          "with their status (one page)"), run.events)
    events.add_argument("receiver_id", type=argtype.ident)
    events.add_argument("--after-seq", type=argtype.not_negative, default=0)
    events.add_argument("--limit", type=argtype.positive, default=100)
    resend = _api(_parser(receivers, "resend", "send a delivered message again, as a new message "
                          "(next seq, webhook-replay-of)"), run.resend)
    resend.add_argument("receiver_id", type=argtype.ident)
    resend.add_argument("message_id", type=argtype.ident)
    resend.add_argument("--id", help="the new message's id (the idempotency key)")
    recover = _api(_parser(receivers, "recover", "send again everything dead-lettered since a time, "
                           "a page at a time, showing progress"), run.recover)
    recover.add_argument("receiver_id", type=argtype.ident)
    recover.add_argument("--since", required=True, metavar="TIME", help="unix seconds or RFC 3339")
    recover.add_argument("--until", metavar="TIME", help="unix seconds or RFC 3339 (default: now)")
    recover.add_argument("--page", type=argtype.positive, default=1000, help="dead letters sent per call")
    tried = _api(_parser(receivers, "transform-test", "run the receiver's transform (or --transform, not "
                         "saved) on a sample payload; nothing is sent"), run.transform_test)
    tried.add_argument("receiver_id", type=argtype.ident)
    tried.add_argument("--payload", type=argtype.payload, required=True,
                       help="JSON, or - to read it from stdin")
    tried.add_argument("--event-type", help="the sample's event type (default transform.test)")
    tried.add_argument("--header", action="append", type=argtype.header, dest="headers", metavar="NAME=VALUE",
                       help="a header of the sample message; repeat for more")
    tried.add_argument("--transform", type=argtype.transform, metavar="JSON|@FILE",
                       help="a template to try instead of the saved one")
    reset = _api(_parser(receivers, "reset-state", "dead-letter the backlog and drop counters and "
                         "history (for testing); needs --confirm"), run.reset_state)
    reset.add_argument("receiver_id", type=argtype.ident)
    reset.add_argument("--confirm", action="store_true", help="yes, drop the backlog and history")


def _receiver_options(parser: argparse.ArgumentParser) -> None:
    """Create/update body fields; `--config` and `--set` reach the ones without an option of their own."""
    add = parser.add_argument
    add("--event-type", action="append", dest="event_types", metavar="PATTERN",
        help="an event type or pattern (invoice.*) to subscribe to; repeat for more")
    add("--tenant", help="events published for a tenant reach only its receivers (--set tenant=null: none)")
    add("--filter", type=argtype.content_filter, dest="content_filter", metavar="JSON|@FILE",
        help='a content filter over payload and headers: \'{"payload": {"amount": {"$gte": 10}}}\' '
        "(null: none)")
    add("--transform", type=argtype.transform, metavar="JSON|@FILE",
        help='a json-e template applied at delivery: \'{"body": {"text": "${payload.name}"}}\' (null: none)')
    add("--secret", help="the signing secret (whsec_... or whsk_...; default: a new one)")
    add("--signing", type=argtype.signing, help="hmac or ed25519")
    add("--header", action="append", type=argtype.header, dest="headers", metavar="NAME=VALUE",
        help="a header sent with each delivery; repeat for more")
    add("--authorization", metavar="VALUE", help="the Authorization header sent with each delivery")
    add("--verify", action=argparse.BooleanOptionalAction, help="verify the endpoint with a challenge")
    add("--rate-limit", type=argtype.finite, metavar="PER_SECOND", help="deliveries a second (0: no limit)")
    add("--batch-max", type=argtype.positive, metavar="N", help="events per POST (above 1: batches)")
    add("--ordering", choices=get_args(Ordering),
        help="strict (default): one at a time in seq order; key: in order per message ordering key, "
        "keys side by side; none: each on its own")
    add("--coalesce", action=argparse.BooleanOptionalAction,
        help="ordering key: a waiting message gives way to a newer one of its key (superseded)")
    add("--max-in-flight", type=argtype.positive, metavar="N",
        help="concurrent POSTs (ordering key or none): the ceiling of an adaptive window")
    add("--concurrency", choices=get_args(Concurrency),
        help="ordering key or none: adaptive (default) grows and cuts the in-flight window with the "
        "receiver's answers; fixed keeps --max-in-flight out")
    add("--delivery-control", choices=get_args(DeliveryControl),
        help="obey (default) or ignore the receiver's webhook-delivery-control answer header "
        "(pause, max-in-flight, rate, disable)")
    add("--heartbeat-interval", type=argtype.finite, metavar="SECONDS",
        help="seconds idle before a signed webhook.heartbeat carrying the last seq (1..86400; 0: none)")
    _auth_options(parser)
    add("--set", action="append", type=argtype.field, dest="set_fields", metavar="FIELD=JSON",
        help='any body field, as JSON: --set \'retry={"max_attempts": 5}\'; repeat for more')
    add("--config", type=argtype.json_object, metavar="JSON|@FILE",
        help="a JSON object of body fields; --set and the options above win over it")


def _auth_options(parser: argparse.ArgumentParser) -> None:
    """`auth`: a client certificate (mutual TLS) or OAuth2 client credentials; key and secret write-only."""
    add = parser.add_argument_group("receiver authentication (auth)").add_argument
    add("--client-cert", type=argtype.pem_file, metavar="PEM_FILE",
        help="mutual TLS: the client certificate (chain, leaf first) presented to the receiver")
    add("--client-key", type=argtype.pem_file, metavar="PEM_FILE",
        help="mutual TLS: the certificate's unencrypted private key (never shown again; an update "
        "with --client-cert alone keeps it)")
    add("--oauth2-token-url", metavar="URL", help="OAuth2 client credentials: the token endpoint")
    add("--oauth2-client-id", metavar="ID")
    add("--oauth2-client-secret", type=argtype.secret_text, metavar="SECRET|@FILE|-",
        help="never shown again; an update without it keeps it")
    add("--oauth2-scope", metavar="SCOPE")
    add("--oauth2-audience", metavar="AUDIENCE")
    add("--oauth2-client-auth", choices=("basic", "body"),
        help="how the client id and secret go to the token endpoint (default basic)")
    add("--no-auth", action="store_true", help="remove the receiver's auth")
    add("--server-ca", type=argtype.pem_file, metavar="PEM_FILE",
        help="the receiver's own CA: the only one its server certificate may chain to (tls.ca)")
    add("--no-server-ca", action="store_true", help="trust the worker's CAs again for this receiver")


# messages, events, dead letters ---------------------------------------------------


def _message_commands(sub: Any) -> None:
    send = _api(_parser(sub, "send", "send a message to one receiver"), run.send)
    send.add_argument("receiver_id", type=argtype.ident)
    send.add_argument("event_type")
    send.add_argument("payload", type=argtype.payload, help="JSON, or - to read it from stdin")
    send.add_argument("--id", help="message id (the idempotency key)")
    send.add_argument("--header", action="append", type=argtype.header, dest="headers", metavar="NAME=VALUE")
    send.add_argument("--ordering-key", metavar="KEY",
                      help="key-ordered receivers keep one key's messages in order")
    _quiet(send, "the message's id")
    batch = _api(_parser(sub, "send-batch", "send up to 1,000 messages at once, all or none"), run.send_batch)
    batch.add_argument("messages", type=argtype.batch, metavar="FILE",
                       help='JSON: a list of messages or {"messages": [...]}, or JSON Lines; - for stdin')
    _quiet(batch, "the messages' ids, one a line")

    messages = sub.add_parser("messages", help="look up messages").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    status = _api(_parser(messages, "status", "pending, delivered or dead-lettered, with its seq"),
                  run.message_status)
    status.add_argument("receiver_id", type=argtype.ident)
    status.add_argument("message_id", type=argtype.ident)

    events = sub.add_parser("events", help="publish events").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    publish = _api(_parser(events, "publish", "publish an event to its subscribers"), run.publish)
    publish.add_argument("event_type")
    publish.add_argument("payload", type=argtype.payload, help="JSON, or - to read it from stdin")
    publish.add_argument("--tenant")
    publish.add_argument("--id", help="event id (the idempotency key)")
    publish.add_argument("--ordering-key", metavar="KEY", help="its copies' ordering key")
    _quiet(publish, "the event's id")


def _dead_letter_commands(sub: Any) -> None:
    letters = sub.add_parser("dead-letters", help="list or replay dead letters").add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    listing = _api(_parser(letters, "list", "a receiver's dead letters, a page (--json: with each message)"),
                   run.list_letters)
    listing.add_argument("receiver_id", type=argtype.ident)
    listing.add_argument("--after-seq", type=argtype.not_negative, default=0)
    listing.add_argument("--limit", type=argtype.positive, default=100)
    replay = _api(_parser(letters, "replay", "replay dead letters, a page at a time"), run.replay)
    replay.add_argument("receiver_id", type=argtype.ident)
    replay.add_argument("--from-seq", type=argtype.positive, default=1)
    replay.add_argument("--to-seq", type=argtype.positive)
    replay.add_argument("--page", type=argtype.positive, default=1000, help="dead letters per call")


def _token_commands(sub: Any) -> None:
    text = "mint, list or revoke tenant tokens (with the admin token)"
    tokens = sub.add_parser("tokens", help=text, description=text).add_subparsers(
        dest="action", required=True, metavar="ACTION"
    )
    create = _api(_parser(tokens, "create", "mint a token that reaches one tenant's receivers only; the "
                          "token is shown this once"), run.create_token)
    create.add_argument("--tenant", required=True, help="the tenant it acts for")
    create.add_argument("--name", help="what the token is for (shown in the list)")
    create.add_argument("--expires-at", metavar="TIME", help="unix seconds or RFC 3339 (default: never)")
    _quiet(create, "the token")
    listing = _api(_parser(tokens, "list", "every token, revoked and expired ones too (never a secret)"),
                   run.list_tokens)
    listing.add_argument("--tenant", help="that tenant's tokens only")
    revoke = _api(_parser(tokens, "revoke", "revoke a token for good"), run.revoke_token)
    revoke.add_argument("token_id", type=argtype.ident)


def _parser(sub: Any, name: str, text: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(name, help=text, description=text)
    return parser


def _api(parser: argparse.ArgumentParser, command: run.Command) -> argparse.ArgumentParser:
    parser.add_argument("--json", action="store_true", help="print the API's answer as JSON")
    parser.add_argument("--field", metavar="PATH",
                        help="print only this field of the answer (state.status: nested); for scripts")
    parser.add_argument("--timeout", type=argtype.seconds, default=30.0, metavar="SECONDS",
                        help="give up on an API call after this long (default 30)")
    parser.set_defaults(api_command=command)
    return parser


def _quiet(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("-q", "--quiet", action="store_true", help=f"print only {what}")


# running ---------------------------------------------------------------------------


def run_api_command(args: argparse.Namespace) -> int:
    url = os.environ.get("DISPATCHER_URL", DEFAULT_URL)
    token = os.environ.get("DISPATCHER_API_TOKEN", "")
    problem = url_problem(url)
    if problem:
        print(f"error: DISPATCHER_URL {problem}", file=sys.stderr)
        return 2
    if not token:
        print("DISPATCHER_API_TOKEN must be set (the token the worker prints or was given)", file=sys.stderr)
        return 2

    if args.field:  # picked from the API's answer as is
        args.json, args.quiet = True, False

    async def go() -> Any:
        async with DispatcherClient(url, token, timeout=args.timeout) as client:
            return await args.api_command(client, args)

    try:
        answer = asyncio.run(go())
    except (ApiError, UsageError, NotReady, orjson.JSONEncodeError, aiohttp.ClientError, OSError) as exc:
        return failed(exc, url, args.timeout)
    if args.field:
        return _print_field(answer, args.field)
    return _print(as_json(answer) if args.json and not getattr(args, "quiet", False) else readable(answer))


def url_problem(url: str) -> str:
    """Why `url` cannot be the API's address ("" if it can): http or https, with a host."""
    try:
        parsed = URL(url)
    except ValueError as exc:
        return f"is not a URL ({exc}): {url!r}"
    if parsed.scheme not in ("http", "https") or not parsed.host:
        return f"must be an http:// or https:// URL with a host, like {DEFAULT_URL}, not {url!r}"
    return ""


def failed(exc: Exception, url: str, timeout: float) -> int:
    """One line on stderr for an error the CLI expects, and its exit status."""
    if isinstance(exc, ApiError):
        where = f"{exc.field}: " if exc.field else ""  # a proxy's page names no field
        return _error(f"{exc.status} {exc.code}: {where}{exc.message}", 1)
    if isinstance(exc, UsageError):
        return _error(str(exc), 2)
    if isinstance(exc, NotReady):
        return _error(str(exc), 1)
    if isinstance(exc, orjson.JSONEncodeError):  # cli_types checks JSON arguments; this is the last guard
        return _error(f"the request cannot be written as JSON: {exc}", 2)
    if isinstance(exc, TimeoutError):  # asyncio's too (an OSError, with no text): before OSError
        return _error(f"no answer from {url} within {timeout:g} s", 1)
    return _error(f"cannot reach {url}: {exc or type(exc).__name__}", 1)  # aiohttp's ClientError, OSError


def _error(text: str, status: int) -> int:
    print(f"error: {escape(text, one_line=True)}", file=sys.stderr)
    return status


def _print_field(answer: Any, path: str) -> int:
    """A string as it is (escaped if it holds a control character), null as an empty line, anything else
    as JSON; a missing field is exit status 1."""
    value = answer
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return _error(f"the answer has no field {path!r}", 1)
        value = value[key]
    if isinstance(value, str):
        return _print(value if is_safe(value) else escape(value))
    return _print("" if value is None else as_json(value))


def _print(text: str) -> int:
    try:
        print(text, flush=True)
    except BrokenPipeError:  # `| head` stopped reading: not an error, but stdout must not be flushed again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
