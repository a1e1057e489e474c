"""DISPATCHER_KAFKA_*: how the worker reaches an authenticated Kafka (TLS, SASL), for every client."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme

from dispatcher.overrides.highwaters import client_options
from dispatcher.settings import Settings, SettingsError
from dispatcher.topology import broker_credentials, build_topology


def settings(**env: str) -> Settings:
    return Settings.from_env({f"DISPATCHER_{k.upper()}": v for k, v in env.items()})


def own_client_auth(s: Settings) -> dict[str, object]:
    """What the worker's own consumers (subscriptions, highwater probes) get from the app."""
    options = client_options(build_topology(s, []).app, "test")
    return {k: v for k, v in options.items() if k not in ("bootstrap_servers", "client_id")}


def test_plaintext_by_default() -> None:
    assert broker_credentials(settings()) is None
    assert own_client_auth(settings()) == {"security_protocol": "PLAINTEXT"}


def test_tls_verifies_the_brokers_against_the_given_ca_with_a_client_certificate(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    ca.issue_cert("webhook-dispatcher").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "me.pem"))
    s = settings(kafka_security_protocol="ssl", kafka_ca_file=str(tmp_path / "ca.pem"),
                 kafka_cert_file=str(tmp_path / "me.pem"))
    auth = own_client_auth(s)
    assert auth["security_protocol"] == "SSL"
    context = auth["ssl_context"]
    assert context.verify_mode.name == "CERT_REQUIRED" and context.check_hostname  # type: ignore[attr-defined]


def test_sasl_scram_over_tls() -> None:
    s = settings(kafka_security_protocol="SASL_SSL", kafka_sasl_username="dispatcher",
                 kafka_sasl_password="pw", kafka_sasl_mechanism="scram-sha-256")
    auth = own_client_auth(s)
    assert auth["security_protocol"] == "SASL_SSL"
    assert (auth["sasl_mechanism"], auth["sasl_plain_username"], auth["sasl_plain_password"]) == (
        "SCRAM-SHA-256", "dispatcher", "pw")
    assert auth["ssl_context"] is not None


@pytest.mark.parametrize(("env", "named"), [
    ({"kafka_security_protocol": "TLS"}, "DISPATCHER_KAFKA_SECURITY_PROTOCOL"),
    ({"kafka_security_protocol": "SASL_PLAINTEXT", "kafka_sasl_username": "u"},
     "DISPATCHER_KAFKA_SASL_PASSWORD"),
    ({"kafka_security_protocol": "SASL_SSL", "kafka_sasl_username": "u", "kafka_sasl_password": "p",
      "kafka_sasl_mechanism": "GSSAPI"}, "DISPATCHER_KAFKA_SASL_MECHANISM"),
    ({"kafka_security_protocol": "SSL", "kafka_ca_file": "/nonexistent/ca.pem"}, "DISPATCHER_KAFKA_CA_FILE"),
])
def test_a_bad_setting_stops_the_worker_naming_it(env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        broker_credentials(settings(**env))
