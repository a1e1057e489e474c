"""What receiver auth costs a delivery: HTTPS with no auth, with an OAuth2 token, with a client certificate.

nginx (HTTPS, asking for a client certificate of a trustme CA, not requiring one) answers
1 KiB POSTs, one in flight per path, on keep-alive connections; the worker's Http1Transport
posts them through the deliverer's auth layer (`AuthedRequests`), so an OAuth2 run includes the
token cache lookup (the token itself comes once from a loopback token server) and an mTLS run
the per-certificate context and pool. A second figure is the cost of a new connection (a TLS
handshake per request, one at a time), where a client certificate adds its signature. CPU is
the client process's (`time.process_time`). Figures are printed, never asserted; the JSON is
saved under bench/results/.

    python -m bench.receiver_auth            # 20,000 POSTs per mode, 3 rounds
    python -m bench.receiver_auth --quick    # a smoke run
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import trustme
from aiohttp import web

from dispatcher.broker import free_port
from dispatcher.domain.addresses import AllowList, TargetPolicy
from dispatcher.domain.receiver_auth import MtlsAuth, OAuth2Auth
from dispatcher.domain.records import ReceiverConfig
from dispatcher.http1 import Http1Transport
from dispatcher.receiver_auth import AuthedRequests
from dispatcher.settings import Settings
from dispatcher.target_guard import TargetGuard

from .http_clients import measure
from .nginx import NginxReceiver
from .runs import RESULTS, run_on, save, worker_loop
from .suite import body_of, cpu_model, progress

MODES = ("none", "oauth2", "mtls")


class Rig:
    """The transport, its auth layer, and one receiver config per mode and path."""

    def __init__(self, nginx: NginxReceiver, ca_file: Path, client: trustme.LeafCert, token_url: str,
                 paths: int) -> None:
        s = Settings()
        guard = TargetGuard(TargetPolicy(AllowList.parse("127.0.0.0/8")))
        self.transport = Http1Transport(guard, s.timeout, s.connect_timeout, s.response_cap, paths * 2,
                                        ca_file)
        self.requests = AuthedRequests(self.transport)
        # its own transport for new connections, so the keep-alive pool above stays warm
        self.fresh = Http1Transport(guard, s.timeout, s.connect_timeout, s.response_cap, 1, ca_file)
        self.fresh_requests = AuthedRequests(self.fresh)
        auth = {
            "none": None,
            "oauth2": OAuth2Auth(token_url, "bench", "bench-secret"),
            "mtls": MtlsAuth(client.cert_chain_pems[0].bytes().decode(),
                             client.private_key_pem.bytes().decode()),
        }
        self.configs = {
            mode: [ReceiverConfig(f"{mode}_{i}", nginx.url(f"{mode}_{i}"), "whsec_x", auth=auth[mode])
                   for i in range(paths)]
            for mode in MODES}

    def post(self, mode: str) -> Callable[[int, bytes, dict[str, str]], Awaitable[int]]:
        configs = self.configs[mode]

        async def post(i: int, body: bytes, headers: dict[str, str]) -> int:
            return (await self.requests.send("POST", configs[i], headers, body)).status

        return post

    async def handshakes(self, mode: str, n: int, body: bytes) -> float:
        """Milliseconds per request when every request opens (and verifies) a new TLS connection."""
        config = self.configs[mode][0]
        started = time.perf_counter()
        for i in range(n):
            resp = await self.fresh_requests.send("POST", config, {"webhook-id": f"c{i}"}, body)
            assert resp.status == 200, resp.status
            await self.fresh.close()  # drops the pool: the next request handshakes
        return (time.perf_counter() - started) / n * 1000


async def token_server() -> tuple[web.AppRunner, str, list[int]]:
    fetched = [0]

    async def token(request: web.Request) -> web.Response:
        fetched[0] += 1
        return web.json_response({"access_token": "bench-token", "token_type": "Bearer", "expires_in": 3600})

    app = web.Application()
    app.router.add_post("/token", token)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}/token", fetched


async def run(args: argparse.Namespace, nginx: NginxReceiver, pki: dict[str, Any]) -> dict[str, Any]:
    runner, token_url, fetched = await token_server()
    rig = Rig(nginx, pki["ca_file"], pki["client"], token_url, args.paths)
    body = orjson.dumps(body_of(1024))
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    handshakes: dict[str, list[float]] = {mode: [] for mode in ("none", "mtls")}
    try:
        for mode in MODES:  # every path's connection opened (and the token fetched) before any figure
            await measure(rig.post(mode), args.paths, args.paths, body)
        for round_no in range(args.rounds):  # interleaved, so a slow spell of the machine hits every mode
            for mode in MODES:
                runs[mode].append(await measure(rig.post(mode), args.posts, args.paths, body))
            for mode in handshakes:
                handshakes[mode].append(await rig.handshakes(mode, args.handshakes, body))
            kept = ", ".join(f"{mode} {r[-1]['cpu_s_per_1000']:.3f} s/1000 ({r[-1]['per_s']:,.0f}/s)"
                             for mode, r in runs.items())
            fresh = ", ".join(f"{m} {h[-1]:.2f} ms" for m, h in handshakes.items())
            progress(f"round {round_no + 1}: {kept}; new connection {fresh}")
    finally:
        for closing in (rig.requests, rig.transport, rig.fresh_requests, rig.fresh):
            await closing.close()
        await runner.cleanup()
    return {
        "keep_alive": {mode: {key: statistics.median(r[key] for r in rs)
                              for key in ("per_s", "cpu_s_per_1000")} for mode, rs in runs.items()},
        "new_connection_ms": {mode: statistics.median(h) for mode, h in handshakes.items()},
        "token_fetches": fetched[0],
    }


def make_pki(tmp: Path) -> dict[str, Any]:
    server_ca, client_ca = trustme.CA(), trustme.CA()
    chain = tmp / "server.pem"
    server = server_ca.issue_cert("127.0.0.1")
    chain.write_bytes(server.private_key_pem.bytes() + b"".join(p.bytes() for p in server.cert_chain_pems))
    ca_file, client_ca_file = tmp / "ca.pem", tmp / "client-ca.pem"
    server_ca.cert_pem.write_to_path(str(ca_file))
    client_ca.cert_pem.write_to_path(str(client_ca_file))
    return {"chain": chain, "ca_file": ca_file, "client_ca_file": client_ca_file,
            "client": client_ca.issue_cert("bench.clients.example")}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--posts", type=int, default=20_000)
    parser.add_argument("--paths", type=int, default=100)
    parser.add_argument("--handshakes", type=int, default=300, help="requests on new connections per mode")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.quick:
        args.posts, args.paths, args.handshakes, args.rounds = 200, 10, 10, 1
    tmp = Path(tempfile.mkdtemp(prefix="bench-auth-"))
    pki = make_pki(tmp)
    loop = worker_loop()
    nginx = NginxReceiver(tmp / "nginx", free_port(), tls_chain=pki["chain"], client_ca=pki["client_ca_file"])
    nginx.start()
    try:
        figures = run_on(loop, run(args, nginx, pki))
    finally:
        nginx.stop()
    result = {"at": time.time(), "cpu": cpu_model(), "cpus": os.cpu_count(), "event_loop": loop,
              "posts": args.posts, "paths": args.paths, "rounds": args.rounds, **figures}
    path = save(result, args.out, "receiver-auth")
    print(f"\n{os.cpu_count()} x {result['cpu']}, event loop {loop}; medians of {args.rounds} rounds")
    for mode, m in figures["keep_alive"].items():
        print(f"HTTPS keep-alive, auth {mode:<8}{m['cpu_s_per_1000']:>8.3f} CPU s/1000"
              f"   {m['per_s']:>8,.0f}/s")
    for mode, ms in figures["new_connection_ms"].items():
        what = "client certificate" if mode == "mtls" else "no client cert"
        print(f"new TLS connection per request, {what}: {ms:.2f} ms")
    print(f"token fetches: {figures['token_fetches']}\n\nsaved {path}")
    return result


if __name__ == "__main__":
    main()
