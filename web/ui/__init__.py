"""The developer console under /ui/: server-rendered Jinja over the API's own calls.

Every worker serves it; a receiver's pages are answered by its owner (`guard.page(owned=True)`).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp_jinja2
import jinja2
from aiohttp import web

from . import auth, lists, receiver, tools
from .filters import FILTERS
from .guard import UI_THROTTLE, page, security_headers, see_other
from .session import LoginThrottle

WEB = Path(__file__).resolve().parent.parent


async def _to_overview(request: web.Request) -> web.StreamResponse:
    return see_other("/ui/")


def environment() -> jinja2.Environment:
    """The console's templates: every value autoescaped, an undefined name an error."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(WEB / "templates"), autoescape=True,
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
    )
    env.filters.update(FILTERS)
    return env


def setup_ui(app: web.Application) -> None:
    """Serve the console on `app` (HTML, not the API: no OpenAPI entry): templates autoescaped,
    static files from the package."""
    app[aiohttp_jinja2.APP_KEY] = environment()
    app[UI_THROTTLE] = LoginThrottle()
    app[tools.TAIL_STOP] = asyncio.Event()
    app.on_shutdown.append(tools.end_tails)
    app.on_response_prepare.append(security_headers)
    add = app.router
    add.add_get("/ui", _to_overview)
    add.add_get("/ui/", page(lists.overview))
    add.add_get("/ui/login", auth.login_form)
    add.add_post("/ui/login", auth.login)
    add.add_post("/ui/logout", page(auth.logout))
    add.add_get("/ui/local/summary", lists.summary_endpoint)
    add.add_get("/ui/receivers", page(lists.receivers))
    one = "/ui/receivers/{receiver_id}"
    add.add_get(one, page(receiver.receiver_page, owned=True))
    add.add_post(one + "/control/{action}", page(receiver.control, owned=True))
    for name, handler in (("ping", receiver.ping), ("verify", receiver.verify), ("rotate", receiver.rotate),
                          ("send", receiver.send_test), ("replay", receiver.replay),
                          ("delete", receiver.delete_receiver)):
        add.add_post(f"{one}/{name}", page(handler, owned=True))
    add.add_get(one + "/messages/{message_id}", page(receiver.message, owned=True))
    add.add_get(one + "/events", page(receiver.events, owned=True))
    add.add_get("/ui/messages", page(tools.lookup))
    add.add_get("/ui/publish", page(tools.publish))
    add.add_post("/ui/publish", page(tools.publish))
    add.add_get("/ui/tail", page(tools.tail_page))
    add.add_get("/ui/tail/stream", page(tools.tail_stream))
    add.add_static("/ui/static/", WEB / "static", append_version=True)
