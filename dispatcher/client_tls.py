"""TLS contexts of receivers with their own TLS settings: a client certificate (mutual TLS), a CA.

A context costs a key load (and a few KiB); deliveries reuse it from a bounded LRU keyed by
the settings' identity (SHA-256s of the certificate and key, and of the CA), so receivers
sharing them share a context. The transports key their connection pools by that identity
too: a connection that authenticated with one receiver's certificate, or was checked against
one receiver's CA, never carries another receiver's request.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path

from .domain.receiver_auth import MtlsAuth, ServerTls

MAX_CONTEXTS = 256


class ClientContexts:
    """Verified TLS contexts: the transport's CAs or the receiver's own, and its client certificate."""

    def __init__(self, base: Callable[[], ssl.SSLContext], size: int = MAX_CONTEXTS) -> None:
        self._base = base  # a new context with the transport's verification settings
        self._size = size
        self._contexts: OrderedDict[bytes, ssl.SSLContext] = OrderedDict()

    def get(self, client: MtlsAuth | None, server: ServerTls | None = None) -> ssl.SSLContext:
        """The context presenting `client` and trusting `server.ca` (else the transport's CAs);
        ssl.SSLError if they will not load."""
        key = tls_identity(client, server)
        context = self._contexts.get(key)
        if context is not None:
            self._contexts.move_to_end(key)
            return context
        # A receiver's own CA replaces the others (verification and host names stay checked).
        context = self._base() if server is None else ssl.create_default_context(cadata=server.ca)
        if client is not None:
            load_client_certificate(context, client.certificate, client.private_key)
        self._contexts[key] = context
        if len(self._contexts) > self._size:
            self._contexts.popitem(last=False)  # connections that hold it keep it alive until they close
        return context

    def __len__(self) -> int:
        return len(self._contexts)


def tls_identity(client: MtlsAuth | None, server: ServerTls | None) -> bytes:
    """What tells one receiver's TLS settings from another's: the context's and the pool's key."""
    return (client.identity if client is not None else b"") + (server.identity if server is not None else b"")


def load_client_certificate(context: ssl.SSLContext, certificate: str, private_key: str) -> None:
    """`context.load_cert_chain` from PEM text.

    The ssl module reads a chain and key only from files. The key goes to an anonymous
    in-memory file (memfd: no path on any disk, gone with its descriptor), read through
    /proc/self/fd; where there is no memfd, to a 0600 temporary file removed as soon as
    the load returns.
    """
    data = (certificate.rstrip() + "\n" + private_key.rstrip() + "\n").encode()
    with _private_file(data) as path:
        context.load_cert_chain(certfile=path)


@contextlib.contextmanager
def _private_file(data: bytes) -> Iterator[str]:
    memfd = getattr(os, "memfd_create", None)
    if memfd is not None and Path("/proc/self/fd").is_dir():
        fd = memfd("client-certificate", os.MFD_CLOEXEC)
        try:
            _write_all(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    fd, path = tempfile.mkstemp(prefix="client-cert-")  # created 0600
    try:
        _write_all(fd, data)
        os.close(fd)
        fd = -1
        yield path
    finally:
        if fd >= 0:
            os.close(fd)
        os.unlink(path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
