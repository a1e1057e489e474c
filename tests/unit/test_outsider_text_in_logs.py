"""Text an outsider chooses (an OAuth2 server's error, a receiver host, a producer's payload through a
transform) reaches the worker's log lines escaped: no line of its making, no field it planted."""

from __future__ import annotations

import logging

import orjson
import pytest

from dispatcher.deliverer import Job, _log_outcome
from dispatcher.domain.lanes import Lane
from dispatcher.domain.records import Outcome, ReceiverConfig
from dispatcher.log_format import JsonFormatter

FORGED = "\n[2026-11-29 12:00:00,000] [1] [INFO] receiver_id=rcv_payroll delivered reason=planted status=200"
CONFIG = ReceiverConfig("r1", "https://h.example/in", "whsec_" + "A" * 32)


def test_an_attempts_error_from_outside_stays_on_its_line_and_plants_no_field(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # An OAuth2 token endpoint's error_description ends up in the attempt's error.
    outcome = Outcome(3, "m-3", "t", False, None, f"auth_error: invalid_client: {FORGED}\u2028x", 5.0, 1.0)
    with caplog.at_level(logging.WARNING, logger="dispatcher.deliverer"):
        _log_outcome(Job("r1", 0, "t", CONFIG, Lane.FAST, "h.example", seq=3, attempt=2), outcome)
    [record] = caplog.records
    text = record.getMessage()
    assert "\n" not in text and "\u2028" not in text, text
    fields = orjson.loads(JsonFormatter().format(record))
    assert (fields["msg_id"], fields["receiver_id"], fields["seq"], fields["attempt"]) == ("m-3", "r1", 3, 2)
    assert fields.get("status") is None and "reason" not in fields, fields
