"""OpenTelemetry traces, when the `otel` extra is installed and the standard OTEL_* variables ask for them.

A trace follows a message: the API's intake span (a caller's `traceparent`
header is its parent), the W3C `traceparent` of the current span in the
record's Kafka headers, the fan-out span of an event, and a span per
delivery attempt whose parent is the `traceparent` the message arrived with
(kept in its backlog entry, so a retry an hour later, or on another worker,
joins the same trace). A producer writing Kafka directly may set its own
`traceparent` header; it is honoured the same way.

Off unless `OTEL_TRACES_EXPORTER` (otlp, console) or an `OTEL_EXPORTER_OTLP_*ENDPOINT`
is set (and `OTEL_SDK_DISABLED` is not true); off, each hook is one attribute
test. The provider is the worker's own, not OpenTelemetry's global one.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

log = logging.getLogger(__name__)

TRACEPARENT = "traceparent"
_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


class Tracing:
    """The worker's tracer, or nothing: while off every call returns at once."""

    def __init__(self, tracer: Any = None, provider: Any = None) -> None:
        self._tracer = tracer
        self._provider = provider
        self.enabled = tracer is not None
        self._propagator: Any = None
        self._kinds: dict[str, Any] = {}
        self._error: Any = None
        if tracer is not None:
            from opentelemetry.trace import SpanKind, Status, StatusCode
            from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

            self._propagator = TraceContextTextMapPropagator()
            self._kinds = {"server": SpanKind.SERVER, "client": SpanKind.CLIENT,
                           "consumer": SpanKind.CONSUMER, "internal": SpanKind.INTERNAL}
            self._error = lambda description: Status(StatusCode.ERROR, description)

    @contextmanager
    def span(
        self, name: str, kind: str = "internal", parent: str | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> Iterator[Any]:
        """A span, child of `parent` (a traceparent) if given, else of the current one; None while off."""
        if self._tracer is None:
            yield None
            return
        context = self._propagator.extract({TRACEPARENT: parent}) if parent else None
        with self._tracer.start_as_current_span(
            name, context=context, kind=self._kinds[kind], attributes=dict(attributes or {})
        ) as span:
            yield span

    def failed(self, span: Any, description: str) -> None:
        """Mark the span failed (a delivery that got no 2xx)."""
        if span is not None:
            span.set_status(self._error(description))

    def traceparent(self) -> str | None:
        """The current span's W3C traceparent (None while off or outside a span)."""
        if self._propagator is None:
            return None
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier)
        return carrier.get(TRACEPARENT)

    def record_headers(self) -> list[tuple[str, bytes]]:
        """Kafka record headers that carry the current span across the hop."""
        parent = self.traceparent()
        return [(TRACEPARENT, parent.encode())] if parent else []

    def shutdown(self) -> None:
        """Export what is still buffered (the worker stops)."""
        if self._provider is not None:
            self._provider.shutdown()


def header_traceparent(headers: Any) -> str | None:
    """The `traceparent` of a Kafka record's headers (a list of pairs or a mapping), if any."""
    if not headers:
        return None
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    for key, value in pairs:
        if key == TRACEPARENT and value:
            text = value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)
            return text[:128]  # a producer's header: bounded (a valid one is 55 characters)
    return None


def wanted(env: Mapping[str, str]) -> bool:
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return any(env.get(name) for name in _ENDPOINTS)


def setup_tracing(env: Mapping[str, str] | None = None, service_name: str = "webhook-dispatcher") -> Tracing:
    """Tracing as the OTEL_* variables configure it; off when they do not, or the extra is missing."""
    env = os.environ if env is None else env
    if not wanted(env):
        return Tracing()
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("OTEL_* asks for traces but the OpenTelemetry SDK is missing: "
                    "pip install 'webhook-dispatcher[otel]'; tracing is off")
        return Tracing()
    exporter = _exporter(env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() or "otlp", env)
    if exporter is None:
        return Tracing()
    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, but what it is given wins.
    named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get("OTEL_RESOURCE_ATTRIBUTES", "")
    provider = TracerProvider(resource=Resource.create({} if named else {"service.name": service_name}))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    log.info("tracing on: exporter %s", type(exporter).__name__)
    return Tracing(provider.get_tracer("webhook-dispatcher"), provider)


def _exporter(name: str, env: Mapping[str, str]) -> Any:
    """The span exporter OTEL_TRACES_EXPORTER names (the OTLP one reads its own OTEL_EXPORTER_OTLP_*)."""
    if name == "console":  # one JSON object per line on stdout, beside the log
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stdout, formatter=lambda span: span.to_json(indent=None) + "\n")
    if name != "otlp":
        log.warning("OTEL_TRACES_EXPORTER=%s: only otlp and console are known; tracing is off", name)
        return None
    grpc = env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip().lower() == "grpc"
    try:
        if grpc:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # type: ignore[assignment]
    except ImportError:
        log.warning("the OTLP exporter is missing: pip install 'webhook-dispatcher[otel]'; tracing is off")
        return None
    return OTLPSpanExporter()
