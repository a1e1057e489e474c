"""DISPATCHER_ADVERTISED_URL: the URL other workers forward requests to (Faust's canonical_url)."""

from __future__ import annotations

import logging

import pytest

from dispatcher.settings import Settings, SettingsError, check_advertised_url, is_wildcard
from dispatcher.topology import faust_config


def pod_name() -> str:
    return "worker-0.dispatcher.ns.svc.cluster.local"


@pytest.mark.parametrize(
    ("raw", "url"),
    [
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
        (" https://Worker-0.Dispatcher:8443 ", "https://worker-0.dispatcher:8443"),
        ("http://[fd00::5]:8080", "http://[fd00::5]:8080"),
        ("http://worker-0", "http://worker-0"),
    ],
)
def test_an_advertised_url_is_scheme_host_and_port(raw: str, url: str) -> None:
    assert check_advertised_url(raw) == url
    settings = Settings.from_env({"DISPATCHER_ADVERTISED_URL": raw, "DISPATCHER_WEB_HOST": "0.0.0.0"})
    assert settings.canonical_url(pod_name) == url, "set: used as is, whatever web_host binds"


@pytest.mark.parametrize(
    "raw",
    [
        "worker-0:8080", "127.0.0.1:8080", "/api", "ftp://worker-0:21", "http://", "http://:8080",
        "http://worker-0:99999", "http://worker-0:8080/api", "http://worker-0:8080?x=1",
        "http://worker-0:8080#top", "http://user:pw@worker-0:8080",
    ],
)
def test_anything_else_stops_the_worker_naming_the_variable(raw: str) -> None:
    settings = Settings.from_env({"DISPATCHER_ADVERTISED_URL": raw})
    with pytest.raises(SettingsError, match=r"^DISPATCHER_ADVERTISED_URL="):
        settings.canonical_url()
    with pytest.raises(SettingsError, match="DISPATCHER_ADVERTISED_URL"):
        faust_config(settings, [])


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "[::]", "0:0:0:0:0:0:0:0", ""])
def test_a_wildcard_bind_advertises_the_host_name_and_says_so(
    host: str, caplog: pytest.LogCaptureFixture
) -> None:
    assert is_wildcard(host)
    with caplog.at_level(logging.WARNING, logger="dispatcher.settings"):
        url = Settings(web_host=host, web_port=8081).canonical_url(pod_name)
    assert url == "http://worker-0.dispatcher.ns.svc.cluster.local:8081"
    assert url in caplog.text and "DISPATCHER_ADVERTISED_URL" in caplog.text


@pytest.mark.parametrize(
    ("host", "url"),
    [("127.0.0.1", "http://127.0.0.1:8080"), ("worker-0", "http://worker-0:8080"), ("::1", "http://[::1]:8080")],
)
def test_a_specific_bind_advertises_itself(host: str, url: str, caplog: pytest.LogCaptureFixture) -> None:
    assert not is_wildcard(host)
    assert Settings(web_host=host).canonical_url(pod_name) == url
    assert not caplog.text


def test_faust_never_gets_a_wildcard_as_canonical_url() -> None:
    """With 0.0.0.0 as canonical_url a forwarded request went to the forwarding host, not the owner."""
    config = faust_config(Settings(web_host="0.0.0.0", web_port=8082), [])
    assert "0.0.0.0" not in str(config["canonical_url"]) and str(config["canonical_url"]).endswith(":8082")
    assert config["web_bind"] == "0.0.0.0", "still binds every interface"
    advertised = Settings(web_host="0.0.0.0", advertised_url="http://10.0.0.7:8080")
    assert faust_config(advertised, [])["canonical_url"] == "http://10.0.0.7:8080"
