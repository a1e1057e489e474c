"""Debian's nginx as the benchmarks' receiver: answers 200 on 127.0.0.1, logs every request.

The binary is unpacked from Debian's package into `bench/.tools/` (`apt-get
download` + `dpkg-deb -x`): nothing is installed system-wide and no service is
started. Each request's log line carries nginx's arrival time (`$msec`: epoch
seconds with millisecond resolution), the path, `webhook-id` and
`webhook-sequence`.
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Container, Iterable
from dataclasses import dataclass
from pathlib import Path

TOOLS = Path(__file__).parent / ".tools"
BINARY = TOOLS / "nginx" / "usr" / "sbin" / "nginx"

CONFIG = """\
worker_processes 1;
daemon off;
master_process off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 8192; multi_accept on; }}
http {{
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    keepalive_requests 1000000;
    keepalive_timeout 120s;
    client_body_buffer_size 1m;
    client_max_body_size 8m;
    log_format hooks '$msec $uri $http_webhook_id $http_webhook_sequence';
    access_log {prefix}/access.log hooks buffer=256k flush=50ms;
    server {{
{listens}{tls}        location / {{ return 200 "ok"; }}
    }}
}}
"""


def ensure_nginx() -> Path:
    """The nginx binary, unpacked from Debian's package on first use."""
    if BINARY.exists():
        return BINARY
    found = shutil.which("nginx")
    if found:
        return Path(found)
    TOOLS.mkdir(parents=True, exist_ok=True)
    # Test processes run side by side (pytest -n): one unpacks, the others wait for it.
    with open(TOOLS / "nginx.lock", "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not BINARY.exists():
            _unpack()
    return BINARY


def _unpack() -> None:
    print("unpacking Debian's nginx into bench/.tools (apt-get download)", flush=True)
    download = ["apt-get", "download", "nginx"]
    if subprocess.run(download, cwd=TOOLS, capture_output=True).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], check=True, capture_output=True)
        subprocess.run(download, cwd=TOOLS, check=True, capture_output=True)
    [deb] = sorted(TOOLS.glob("nginx_*.deb"))
    unpacked = TOOLS / "nginx.partial"
    shutil.rmtree(unpacked, ignore_errors=True)  # left by a run killed midway
    subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
    shutil.rmtree(TOOLS / "nginx", ignore_errors=True)
    unpacked.rename(TOOLS / "nginx")  # BINARY exists only once the whole package is there
    deb.unlink()


@dataclass(frozen=True, slots=True)
class Hit:
    at: float  # arrival, epoch seconds (1 ms resolution)
    path: str
    msg_id: str
    seq: int


def first_arrivals(hits: Iterable[Hit], wanted: Container[str]) -> dict[str, Hit]:
    """The first hit of each message id in `wanted`, by id (a retried delivery arrives again)."""
    found: dict[str, Hit] = {}
    for hit in hits:
        if hit.msg_id in wanted:
            found.setdefault(hit.msg_id, hit)
    return found


# TLS as a receiver would set it up: TLS 1.2 and 1.3, sessions resumable (tickets and a cache).
TLS = """\
        ssl_certificate {chain};
        ssl_certificate_key {chain};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:hooks:10m;
        ssl_session_timeout 10m;
"""


class NginxReceiver:
    """One nginx process (started and stopped here, by PID) on 127.0.0.1:port.

    `origins`: the (address, port) pairs it listens on instead (any 127/8 address is loopback),
    one receiver behind many origins; `url` is then the first's. `tls_chain`: a PEM file with the private key
    and the certificate chain; every origin then speaks HTTPS.
    """

    def __init__(self, prefix: Path, port: int, origins: list[tuple[str, int]] | None = None,
                 tls_chain: Path | None = None, client_ca: Path | None = None) -> None:
        self.prefix = prefix
        self.port = port
        self.origins = origins or [("127.0.0.1", port)]
        self.tls_chain = tls_chain
        self.client_ca = client_ca  # asks for a client certificate of this CA (optional: not required)
        self.log_path = prefix / "access.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._read_at = 0
        self._partial = b""
        self.hits: list[Hit] = []

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self._process

    def url(self, path: str) -> str:
        return self.origin_url(0, path)

    def origin_url(self, origin: int, path: str) -> str:
        """The URL of `path` at the `origin`-th (address, port) this nginx listens on."""
        host, port = self.origins[origin % len(self.origins)]
        return f"{'https' if self.tls_chain else 'http'}://{host}:{port}/{path}"

    def start(self) -> NginxReceiver:
        binary = ensure_nginx()
        self.prefix.mkdir(parents=True, exist_ok=True)
        conf = self.prefix / "nginx.conf"
        ssl = " ssl" if self.tls_chain else ""
        listens = "".join(f"        listen {host}:{port} backlog=4096 reuseport{ssl};\n"
                          for host, port in self.origins)
        tls = TLS.format(chain=self.tls_chain) if self.tls_chain else ""
        if self.tls_chain and self.client_ca:
            tls += f"        ssl_client_certificate {self.client_ca};\n        ssl_verify_client optional;\n"
        conf.write_text(CONFIG.format(prefix=self.prefix, listens=listens, tls=tls))
        # Errors found before the error log is open (the configuration's) go to stderr.
        with (self.prefix / "stderr.log").open("wb") as stderr:
            self._process = subprocess.Popen(
                [str(binary), "-p", str(self.prefix), "-c", str(conf)],
                stdin=subprocess.DEVNULL, stdout=stderr, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # bounded: listening within 10 s or fail
            if self._process.poll() is not None:
                raise RuntimeError(f"nginx exited: {self._error_log_tail()}")
            with contextlib.suppress(OSError):
                for host, port in self.origins:
                    socket.create_connection((host, port), 0.2).close()
                return self
            time.sleep(0.05)
        self.stop()  # ours, by the PID we started
        raise TimeoutError(f"nginx did not listen within 10 s: {self._error_log_tail()}")

    def _error_log_tail(self) -> str:
        """The last lines nginx wrote to stderr and its error log (why it would not start)."""
        lines: list[str] = []
        for log in (self.prefix / "stderr.log", self.prefix / "error.log"):
            with contextlib.suppress(OSError):
                lines += log.read_text(errors="replace").splitlines()[-5:]
        return " | ".join(lines) or f"nothing in {self.prefix / 'error.log'}"

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGQUIT)  # graceful: flushes the access log
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)

    def read(self) -> list[Hit]:
        """Every request logged so far (the log is flushed every 50 ms), in arrival order."""
        if not self.log_path.exists():
            return self.hits
        with self.log_path.open("rb") as f:
            f.seek(self._read_at)
            chunk = f.read()
        self._read_at += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            at, path, msg_id, seq = line.decode().split(" ")
            self.hits.append(Hit(float(at), path.lstrip("/"), msg_id, int(seq) if seq.isdigit() else 0))
        return self.hits
