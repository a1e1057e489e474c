"""The developer console end to end: a real worker, real loopback receivers, and Debian's Chromium
driven by Playwright. One worker and one browser serve the whole module.

Screenshots of each page go to `DISPATCHER_UI_SCREENSHOTS` (a directory; `docs/ui` refreshes the
README's) or, unset, to a temporary directory.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.harness import (
    TOKEN,
    Api,
    Delivery,
    Receiver,
    ScriptedReceiver,
    WorkerProcess,
    answering,
    first_copies,
    wait_until,
    wait_until_read,
)

CHROMIUM = os.environ.get("DISPATCHER_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
HOSTILE = "<script>window.pwned=1</script><img src=x onerror=\"window.pwned=1\">"
LIMIT = 30.0  # s any one wait may take


def _browser_missing() -> str:
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[dev]')"
    if not (shutil.which(CHROMIUM) or Path(CHROMIUM).exists()):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    return ""


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Any]:
    missing = _browser_missing()
    if missing:
        if os.environ.get("DISPATCHER_REQUIRE_BROWSER") == "1":
            pytest.fail(f"DISPATCHER_REQUIRE_BROWSER=1 but {missing}")
        pytest.skip(missing)
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        await chromium.close()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = os.environ.get("DISPATCHER_UI_SCREENSHOTS")
    path = Path(target) if target else tmp_path_factory.mktemp("ui-shots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
async def console(browser: Any, worker: WorkerProcess) -> AsyncIterator[Any]:
    """A page logged in to the worker's console."""
    context = await browser.new_context(viewport={"width": 1280, "height": 900})
    page = await context.new_page()
    await page.goto(worker.url + "/ui/")
    await page.fill("#token", TOKEN)
    await page.click("button[type=submit]")
    await page.wait_for_url(worker.url + "/ui/")
    yield page
    await context.close()


@pytest.fixture(scope="module")
async def recv() -> AsyncIterator[Receiver]:
    """One loopback receiver; each test uses its own path (and behaviour per path)."""
    behaviours: dict[str, Callable[[Delivery], Awaitable[int | tuple[int, dict[str, str]]]]] = {}

    async def behaviour(path: str, delivery: Delivery) -> int | tuple[int, dict[str, str]]:
        chosen = behaviours.get(path)
        return await chosen(delivery) if chosen else 200

    server = await Receiver(behaviour).start()
    server.behaviours = behaviours  # type: ignore[attr-defined]
    yield server
    await server.stop()


async def reload_until(page: Any, selector: str, check: Callable[[str], bool], what: str) -> str:
    """Reload the (server-rendered) page until `selector`'s text passes `check`."""

    async def read() -> str:
        await page.reload()
        found = await page.locator(selector).all_inner_texts()  # no waiting for it to appear
        return found[0] if found else ""

    return str(await wait_until_read(read, check, LIMIT, what, step=0.2))


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


async def test_pages_without_a_session_go_to_login_and_a_bad_token_is_refused(
    browser: Any, worker: WorkerProcess, shots: Path
) -> None:
    context = await browser.new_context()
    page = await context.new_page()
    for path in ("/ui/", "/ui/receivers", "/ui/receivers/rcv_x", "/ui/tail", "/ui/publish"):
        await page.goto(worker.url + path)
        assert page.url.startswith(worker.url + "/ui/login?next="), path
    await page.screenshot(path=shots / "login.png")
    await page.fill("#token", "not-the-token")
    await page.click("button[type=submit]")
    await page.wait_for_selector("p.error")
    assert "That is not the API token." in await page.inner_text("main")
    await page.fill("#token", TOKEN)
    await page.click("button[type=submit]")
    await page.wait_for_url(worker.url + "/ui/publish")  # where it was going
    cookie = next(c for c in await context.cookies() if c["name"] == "dispatcher_ui")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["expires"] > time.time()
    await page.click("text=Log out")
    await page.wait_for_url(worker.url + "/ui/login")
    await page.goto(worker.url + "/ui/receivers")
    assert page.url.startswith(worker.url + "/ui/login")
    await context.close()


async def test_find_a_receiver_by_search_and_see_its_last_response(
    console: Any, api: Api, recv: Receiver, worker: WorkerProcess, shots: Path
) -> None:
    path = unique("find-me")
    rid = (await api.create_receiver(recv.url(path), event_types=["order.*"], tenant="acme"))["id"]
    await api.create_receiver(recv.url(unique("other")))
    status, _ = await api.call("POST", "/v1/messages",
                               {"receiver_id": rid, "event_type": "order.paid", "payload": {"n": 1}})
    assert status == 202
    await wait_until(lambda: len(recv.by_path(path)) == 1, LIMIT, "the delivery")
    await console.goto(worker.url + "/ui/receivers")
    await console.keyboard.press("Tab")  # the keyboard's first stop skips the navigation
    assert await console.evaluate("document.activeElement.textContent") == "Skip to content"
    await console.fill("#q", path)
    await console.click("text=Search")
    rows = console.locator("#receivers tbody tr")
    assert await rows.count() == 1
    await console.screenshot(path=shots / "receivers.png", full_page=True)
    await console.click(f"text={rid}")
    await console.wait_for_url(f"{worker.url}/ui/receivers/{rid}")
    await reload_until(console, "#last-status", lambda text: text == "200", "the last response on the page")
    assert await console.inner_text("#last-body") == "ok"
    assert await console.inner_text("#status") == "active"
    await console.screenshot(path=shots / "receiver.png", full_page=True)


async def test_the_receiver_page_shows_its_window_what_it_asked_and_heartbeats(
    console: Any, api: Api, recv: Receiver, worker: WorkerProcess
) -> None:
    path = unique("asked")

    async def steer(delivery: Delivery) -> tuple[int, dict[str, str]]:
        return 200, {"Webhook-Delivery-Control": "max-in-flight=2, rate=5"}

    recv.behaviours[path] = steer  # type: ignore[attr-defined]
    options = {"ordering": "none", "max_in_flight": 4, "heartbeat_interval": 3600}
    rid = (await api.create_receiver(recv.url(path), **options))["id"]
    await api.call("POST", "/v1/messages", {"receiver_id": rid, "event_type": "t.asked", "payload": {}})
    await console.goto(f"{worker.url}/ui/receivers/{rid}")
    await reload_until(console, "#asked-cap", lambda text: text == "2", "the cap the receiver asked for")
    assert await console.inner_text("#asked-rate") == "5/s"
    assert (await console.inner_text("#window")).endswith(" of 4 (adaptive)")
    assert await console.inner_text("#heartbeats-sent") == "0"
    control = await console.locator("#attempts td.control").first.inner_text()
    assert control == "webhook-delivery-control: max-in-flight 2; rate 5/s"


async def test_pause_holds_messages_and_resume_drains_them_in_order(
    console: Any, api: Api, recv: Receiver, worker: WorkerProcess
) -> None:
    path = unique("pause")
    rid = (await api.create_receiver(recv.url(path)))["id"]
    await console.goto(f"{worker.url}/ui/receivers/{rid}")
    await console.click("button:has-text('Pause')")
    await console.wait_for_url(f"{worker.url}/ui/receivers/{rid}?done=pause")
    assert await console.inner_text("#status") == "paused"
    for n in range(3):
        body = {"receiver_id": rid, "event_type": "t.held", "payload": {"n": n}}
        assert (await api.call("POST", "/v1/messages", body))[0] == 202
        await reload_until(console, "#backlog", lambda text, n=n: text == str(n + 1), f"{n + 1} held")
    assert recv.by_path(path) == []
    await console.click("button:has-text('Resume')")
    await console.wait_for_url(f"{worker.url}/ui/receivers/{rid}?done=resume")  # no reload mid-navigation
    await wait_until(lambda: len(first_copies(recv.by_path(path))) == 3, LIMIT, "the held messages")
    assert [d.seq for d in first_copies(recv.by_path(path))] == [1, 2, 3]  # at least once, in order
    await reload_until(console, "#backlog", lambda text: text == "0", "the backlog drained")
    assert await console.inner_text("#delivered-seq") == "3"


async def test_replay_a_dead_letter_and_see_it_delivered(
    console: Any, api: Api, recv: Receiver, worker: WorkerProcess, shots: Path
) -> None:
    path = unique("replay")
    answer = {"status": 400}

    async def refuse_then_accept(delivery: Delivery) -> int:
        return answer["status"]

    recv.behaviours[path] = refuse_then_accept  # type: ignore[attr-defined]
    rid = (await api.create_receiver(recv.url(path)))["id"]
    body = {"receiver_id": rid, "event_type": "t.replay", "payload": {"x": 1}}
    await api.call("POST", "/v1/messages", body)
    await console.goto(f"{worker.url}/ui/receivers/{rid}")
    await reload_until(console, "#dead-letters tbody td:nth-child(3)", lambda t: t == "permanent_status",
                       "the dead letter")
    answer["status"] = 200
    await console.click("#replay")
    assert "Replayed 1 dead letters" in await console.inner_text("#replayed")
    await wait_until(lambda: any(d.seq == 2 for d in recv.by_path(path)), LIMIT, "the replayed message")
    await reload_until(console, "#delivered-seq", lambda text: text == "2", "the replay delivered")
    assert await console.inner_text("#last-status") == "200"
    await console.screenshot(path=shots / "receiver-dead-letter-replayed.png", full_page=True)
    msg_id = recv.by_path(path)[-1].msg_id
    await console.goto(f"{worker.url}/ui/messages")
    await console.fill("#receiver_id", rid)
    await console.fill("#message_id", msg_id)
    await console.click("main button[type=submit]")
    assert await console.inner_text("#message-status") == "delivered"
    assert (await console.inner_text("#timeline")).startswith("200")  # the replay's one attempt
    await console.screenshot(path=shots / "message.png", full_page=True)
    await console.goto(f"{worker.url}/ui/receivers/{rid}/events")
    assert await console.locator("#events tbody tr").count() == 2, await console.inner_text("#events")
    for text, rows in (('"X":1', 2), ("t.REPLAY", 2), ("nothing like it", 0)):  # payload search
        await console.goto(f"{worker.url}/ui/receivers/{rid}/events?{urlencode({'q': text})}")
        assert await console.locator("#events tbody tr td a").count() == rows, text
    await console.screenshot(path=shots / "catch-up.png", full_page=True)


async def test_script_in_a_receivers_answer_never_runs(console: Any, api: Api, worker: WorkerProcess) -> None:
    body = HOSTILE.encode()
    # content-type: one of the headers the worker keeps
    raw = (b"HTTP/1.1 418 I'm a teapot\r\ncontent-type: text/html; " + body +
           b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    hostile = await ScriptedReceiver(answering(raw)).start()
    try:
        rid = (await api.create_receiver(hostile.url("hook?q=%3Cscript%3Ewindow.pwned=1%3C/script%3E")))["id"]
        await console.goto(f"{worker.url}/ui/receivers/{rid}")
        await console.click("button:has-text('Ping')")
        shown = await console.inner_text("#ping-answer")
        assert f"content-type\ttext/html; {HOSTILE}" in shown and shown.endswith(HOSTILE)  # as text
        for url in (f"/ui/receivers/{rid}", f"/ui/receivers?q={HOSTILE}", "/ui/", f"/ui/tail?q={HOSTILE}"):
            await console.goto(worker.url + url)
            assert await console.evaluate("window.pwned") is None, url
    finally:
        await hostile.stop()


async def test_a_post_without_the_csrf_token_is_refused(
    console: Any, api: Api, recv: Receiver, worker: WorkerProcess
) -> None:
    rid = (await api.create_receiver(recv.url(unique("csrf"))))["id"]
    for form in ({}, {"csrf": "forged"}):
        response = await console.request.post(f"{worker.url}/ui/receivers/{rid}/control/pause", form=form)
        assert response.status == 403
        assert "CSRF" in await response.text()
    assert not (await api.state(rid))["paused"]


async def test_publish_and_the_live_tail(
    console: Any, api: Api, recv: Receiver, worker: WorkerProcess, shots: Path
) -> None:
    path = unique("tail")
    rid = (await api.create_receiver(recv.url(path), event_types=["tail.*"]))["id"]
    await console.goto(f"{worker.url}/ui/tail?receiver_id={rid}")
    # a locator, not wait_for_function: the page's CSP forbids the eval that one polls with
    await console.locator("#tail-state").filter(has_text="Live.").wait_for(timeout=LIMIT * 1000)
    await api.call("POST", "/v1/messages", {"receiver_id": rid, "event_type": "tail.one", "payload": {}})
    await console.locator("#tail tbody tr").first.wait_for(timeout=LIMIT * 1000)
    assert rid in await console.inner_text("#tail tbody tr")
    await console.screenshot(path=shots / "tail.png")
    await console.goto(f"{worker.url}/ui/publish")
    await console.fill("#event_type", "tail.two")
    await console.fill("#payload", '{"hello": "world"}')
    await console.click("main button[type=submit]")
    _, matching = await api.call("GET", "/v1/receivers?event_type=tail.two&limit=1000")
    assert await console.inner_text("#matched") == str(len(matching["receivers"]))  # the API's count
    await console.screenshot(path=shots / "publish.png")
    await wait_until(lambda: len(recv.by_path(path)) == 2, LIMIT, "the published event")
    await console.goto(worker.url + "/ui/")
    assert int(await console.inner_text("#attempts-ok")) >= 1
    await console.screenshot(path=shots / "overview.png", full_page=True)
    phone = await console.context.browser.new_context(viewport={"width": 390, "height": 844},
                                                      storage_state=await console.context.storage_state())
    small = await phone.new_page()
    await small.goto(f"{worker.url}/ui/receivers/{rid}")
    await small.screenshot(path=shots / "receiver-phone.png", full_page=True)
    await phone.close()


async def test_send_rotate_and_delete_from_the_receiver_page(
    console: Any, api: Api, recv: Receiver, worker: WorkerProcess
) -> None:
    path = unique("actions")
    rid = (await api.create_receiver(recv.url(path)))["id"]
    await console.goto(f"{worker.url}/ui/receivers/{rid}")
    await console.fill("#event_type", "test.sent")
    await console.fill("#payload", '{"from": "the console"}')
    await console.click("#send")
    assert "Sent message" in await console.inner_text("#sent")
    await wait_until(lambda: len(recv.by_path(path)) == 1, LIMIT, "the test message")
    assert recv.by_path(path)[0].headers["webhook-event-type"] == "test.sent"
    await console.click("button:has-text('Rotate secret')")
    secret = await console.input_value("#secret")
    assert secret.startswith("whsec_")
    await console.goto(f"{worker.url}/ui/receivers/{rid}")
    assert secret not in await console.content()  # shown once, never again
    await console.fill("#confirm", "not-its-id")
    await console.click("button:has-text('Delete receiver')")
    assert "type the receiver's id" in await console.inner_text("main")
    await console.goto(f"{worker.url}/ui/receivers/{rid}")
    await console.fill("#confirm", rid)
    await console.click("button:has-text('Delete receiver')")
    assert await console.inner_text("h1") == f"Deleted {rid}"
    assert (await api.call("GET", f"/v1/receivers/{rid}"))[0] == 404
