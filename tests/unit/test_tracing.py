"""Tracing's hooks with the OpenTelemetry SDK's in-memory exporter: the context crosses a record header."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from dispatcher.tracing import Tracing, header_traceparent, setup_tracing, wanted

PRODUCER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def traced() -> tuple[Tracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Tracing(provider.get_tracer("test"), provider), exporter


def test_a_span_on_the_far_side_of_a_record_is_the_child_of_the_span_that_produced_it() -> None:
    tracing, exporter = traced()
    with tracing.span("POST /v1/messages", "server", PRODUCER):
        headers = tracing.record_headers()  # what the API's record carries to Kafka
    parent = header_traceparent(headers)  # ... and what the owner reads from it
    with tracing.span("webhook.deliver", "client", parent, {"webhook.seq": 1}) as span:
        tracing.failed(span, "HTTP 503")
    intake, deliver = exporter.get_finished_spans()
    assert intake.parent is not None and format(intake.parent.span_id, "016x") == "b7ad6b7169203331"
    assert intake.context.trace_id == deliver.context.trace_id == int("0af7651916cd43dd8448eb211c80319c", 16)
    assert deliver.parent is not None and deliver.parent.span_id == intake.context.span_id
    assert deliver.attributes == {"webhook.seq": 1} and deliver.status.description == "HTTP 503"


def test_off_costs_nothing_and_names_no_parent() -> None:
    off = Tracing()
    with off.span("anything", "server", PRODUCER) as span:
        assert span is None and off.traceparent() is None and off.record_headers() == []
    assert not off.enabled


def test_a_records_traceparent_is_read_from_pairs_or_a_mapping_and_bounded() -> None:
    assert header_traceparent([("other", b"x"), ("traceparent", PRODUCER.encode())]) == PRODUCER
    assert header_traceparent({"traceparent": PRODUCER.encode()}) == PRODUCER
    assert header_traceparent(None) is None and header_traceparent([("traceparent", b"")]) is None
    assert len(header_traceparent([("traceparent", b"x" * 10_000)]) or "") == 128


def test_only_the_standard_variables_turn_it_on() -> None:
    assert not wanted({})
    assert wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert wanted({"OTEL_TRACES_EXPORTER": "console"})
    assert not wanted({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert not wanted({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"})
    assert not setup_tracing({}).enabled
    assert not setup_tracing({"OTEL_TRACES_EXPORTER": "zipkin"}).enabled  # unknown: off, with a warning
