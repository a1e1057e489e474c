"""The SSRF deny table and host parsing, as data: nothing here opens a connection."""

from __future__ import annotations

import ipaddress

import pytest

from dispatcher.domain.addresses import (
    AllowList,
    TargetPolicy,
    check_literal_target,
    denied_reason,
    legacy_ipv4,
    parse_target,
)
from dispatcher.domain.errors import InvalidInput


def full_width(text: str) -> str:
    """Digits and dots as their full-width forms (U+FF10.., U+FF0E), which NFKC folds back."""
    return text.translate({ord(c): ord(c) + 0xFEE0 for c in "0123456789."})

DENIED = [
    ("0.0.0.0", "this network"),
    ("0.1.2.3", "this network"),
    ("10.0.0.1", "private"),
    ("10.255.255.255", "private"),
    ("100.64.0.1", "carrier-grade NAT"),
    ("100.127.255.254", "carrier-grade NAT"),
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("169.254.169.254", "link-local (cloud metadata)"),
    ("169.254.170.2", "link-local (cloud metadata)"),
    ("172.16.0.1", "private"),
    ("172.31.255.255", "private"),
    ("192.0.0.8", "IETF protocol assignments"),
    ("192.0.0.170", "IETF protocol assignments"),  # NAT64 discovery
    ("192.0.2.1", "documentation"),
    ("192.88.99.1", "6to4 relay anycast"),
    ("192.168.1.1", "private"),
    ("198.18.0.1", "benchmarking"),
    ("198.19.255.255", "benchmarking"),
    ("198.51.100.7", "documentation"),
    ("203.0.113.9", "documentation"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
    ("::", "unspecified"),
    ("::1", "loopback"),
    ("::127.0.0.1", "IPv4-compatible (deprecated)"),
    ("::8.8.8.8", "IPv4-compatible (deprecated)"),
    ("::ffff:127.0.0.1", "IPv4-mapped loopback"),
    ("::ffff:169.254.169.254", "IPv4-mapped link-local (cloud metadata)"),
    ("::ffff:10.0.0.1", "IPv4-mapped private"),
    ("::ffff:0:8.8.8.8", "IPv4-translated"),
    ("64:ff9b::7f00:1", "NAT64"),
    ("64:ff9b::808:808", "NAT64"),
    ("64:ff9b:1::1", "local-use NAT64"),
    ("100::1", "discard-only"),
    ("2001::1", "Teredo"),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
    ("2001:2::1", "benchmarking"),
    ("2001:db8::1", "documentation"),
    ("2002:7f00:1::1", "6to4"),
    ("2002:a9fe:a9fe::", "6to4"),
    ("3fff::1", "documentation"),
    ("fc00::1", "unique local (private)"),
    ("fd12:3456::1", "unique local (private)"),
    ("fe80::1", "link-local"),
    ("fe80::1%eth0", "link-local"),
    ("fec0::1", "site-local (deprecated)"),
    ("ff02::1", "multicast"),
    ("ff05::2", "multicast"),
]

PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "100.63.255.255",  # just below carrier-grade NAT
    "100.128.0.0",  # just above it
    "172.32.0.1",  # just above 172.16/12
    "198.20.0.1",  # just above benchmarking
    "192.0.1.1",
    "223.255.255.255",
    "2606:4700:4700::1111",
    "2a00:1450:4001:80b::200e",
    "::ffff:8.8.8.8",
    "2001:4860:4860::8888",  # Google, inside 2001::/16 but not Teredo's /32
]


@pytest.mark.parametrize(("address", "reason"), DENIED)
def test_denied_addresses_carry_their_reason(address: str, reason: str) -> None:
    assert denied_reason(ipaddress.ip_address(address)) == reason


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert denied_reason(ipaddress.ip_address(address)) is None


def test_the_table_does_not_lean_on_is_global() -> None:
    """Python calls these global; they are not places to send webhooks."""
    for text in ["64:ff9b::808:808", "ff0e::1", "2002:a9fe:a9fe::"]:
        address = ipaddress.ip_address(text)
        assert address.is_global and denied_reason(address) is not None


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0x7F.0.0.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("169.254.43518", "169.254.169.254"),
        ("0", "0.0.0.0"),
        (full_width("127") + ".1", "127.0.0.1"),
    ],
)
def test_legacy_numeric_hosts_decode_as_inet_aton_does(host: str, address: str) -> None:
    assert legacy_ipv4(host) == ipaddress.IPv4Address(address)


@pytest.mark.parametrize("host", ["example.com", "0x7g.1", "256.256.256.256.1", "1.2.3.4.5", "08.1"])
def test_names_are_not_numeric(host: str) -> None:
    assert legacy_ipv4(host) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://2130706433/",
        "http://0x7f.1/",
        "http://0177.0.0.1/",
        "http://127.1/",
        "http://" + full_width("127.1") + "/",
        "http://0x08080808/",  # even a public address: write it plainly
    ],
)
def test_urls_with_numeric_tricks_are_refused(url: str) -> None:
    with pytest.raises(InvalidInput, match="non-standard form") as info:
        parse_target(url)
    assert info.value.field == "url"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://127.0.0.1./",
        "http://" + full_width("127.0.0.1") + "/",
        "http://127\u30020\u30020\u30021/",  # ideographic full stops
        "http://[::1]:8080/",
        "http://[::ffff:127.0.0.1]/",
        "http://[0:0:0:0:0:ffff:7f00:1]/",
        "https://[fe80::1%25eth0]/",
        "http://169.254.169.254/latest/meta-data/",
        "http://0.0.0.0:9000/",
        "http://[::]/",
    ],
)
def test_literal_denied_urls_are_refused_naming_the_url(url: str) -> None:
    with pytest.raises(InvalidInput, match="not an allowed target") as info:
        check_literal_target(parse_target(url), TargetPolicy())
    assert info.value.field == "url"
    assert info.value.code == "forbidden_target"


def test_names_are_left_to_the_resolver_and_public_literals_pass() -> None:
    assert parse_target("https://hooks.example.com/x").address is None
    check_literal_target(parse_target("https://8.8.8.8/"), TargetPolicy())
    check_literal_target(parse_target("https://[2606:4700::1111]/"), TargetPolicy())


def test_allow_list_opens_networks_and_single_endpoints_only() -> None:
    allow = AllowList.parse("127.0.0.0/8, ::1 10.0.0.5:8443,[fd00::1]:443")
    policy = TargetPolicy(allow)
    ip = ipaddress.ip_address
    assert policy.refusal(ip("127.0.0.2"), 1) is None
    assert policy.refusal(ip("::1"), 80) is None
    assert policy.refusal(ip("10.0.0.5"), 8443) is None
    assert policy.refusal(ip("10.0.0.5"), 8444) == "10.0.0.5 is a private address"
    assert policy.refusal(ip("fd00::1"), 443) is None
    assert policy.refusal(ip("169.254.169.254"), 80) is not None
    assert "10.0.0.5:8443" in allow.describe()


@pytest.mark.parametrize("spec", ["hooks.internal:443", "10.0.0.0/33", "127.0.0.1:0", "nope"])
def test_bad_allow_list_entries_name_the_entry(spec: str) -> None:
    with pytest.raises(InvalidInput) as info:
        AllowList.parse(f"127.0.0.1 {spec}")
    assert info.value.field == "DISPATCHER_ALLOW_TARGETS[1]"


# Cloud metadata endpoints outside the ranges above, and the ones the ranges already cover.
METADATA = [
    ("168.63.129.16", "Azure wire server (cloud metadata)"),
    ("::ffff:168.63.129.16", "IPv4-mapped Azure wire server (cloud metadata)"),
    ("::168.63.129.16", "IPv4-compatible (deprecated)"),
    ("64:ff9b::a83f:8110", "NAT64"),  # 168.63.129.16 through NAT64
    ("2002:a83f:8110::1", "6to4"),
    ("169.254.169.254", "link-local (cloud metadata)"),  # AWS, GCP, Azure IMDS, OpenStack, ...
    ("169.254.170.2", "link-local (cloud metadata)"),  # AWS ECS task metadata
    ("169.254.0.23", "link-local (cloud metadata)"),  # Tencent Cloud
    ("169.254.42.42", "link-local (cloud metadata)"),  # Scaleway
    ("100.100.100.200", "carrier-grade NAT"),  # Alibaba Cloud
    ("192.0.0.192", "IETF protocol assignments"),  # Oracle Cloud
    ("fd00:ec2::254", "unique local (private)"),  # AWS IMDS over IPv6
    ("fd20:ce::254", "unique local (private)"),  # GCP metadata over IPv6
    ("fd00:42::42", "unique local (private)"),  # Scaleway over IPv6
]


@pytest.mark.parametrize(("address", "reason"), METADATA)
def test_cloud_metadata_endpoints_are_denied(address: str, reason: str) -> None:
    assert denied_reason(ipaddress.ip_address(address)) == reason


def test_only_the_azure_wire_server_is_denied_in_its_public_range() -> None:
    for neighbour in ["168.63.129.15", "168.63.129.17", "168.63.0.1"]:
        assert denied_reason(ipaddress.ip_address(neighbour)) is None
    assert TargetPolicy().refusal(ipaddress.ip_address("168.63.129.16"), 80) == (
        "168.63.129.16 is an Azure wire server (cloud metadata) address"
    )


def test_a_network_entry_opens_every_port_the_deny_table_would_for_a_public_address() -> None:
    """The deny table has no port rule: a network entry opens any port, an endpoint entry one."""
    policy = TargetPolicy(AllowList.parse("10.0.0.0/8 10.9.9.9:8443"))
    ip = ipaddress.ip_address
    for port in [1, 22, 80, 443, 8443, 65535]:
        assert TargetPolicy().refusal(ip("93.184.216.34"), port) is None
        assert policy.refusal(ip("10.1.2.3"), port) is None
    assert policy.refusal(ip("11.0.0.1"), 443) is None and policy.refusal(ip("172.16.0.1"), 443) is not None
    narrow = TargetPolicy(AllowList.parse("10.9.9.9:8443"))
    assert narrow.refusal(ip("10.9.9.9"), 8443) is None
    assert narrow.refusal(ip("10.9.9.9"), 8444) == "10.9.9.9 is a private address"


def test_a_network_with_a_port_is_not_an_allow_list_form() -> None:
    with pytest.raises(InvalidInput, match="neither a CIDR") as info:
        AllowList.parse("10.0.0.0/8:8443")
    assert info.value.field == "DISPATCHER_ALLOW_TARGETS[0]"
