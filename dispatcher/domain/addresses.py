"""Which addresses a receiver URL may reach: the SSRF deny table and the allow list.

Our own table rather than `ipaddress.is_global`/`is_private`: their flags
changed between Python versions, and they call multicast and NAT64 forms
global. Pure data and parsing; the delivery connector enforces it on every
address it dials.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from dataclasses import dataclass

from yarl import URL

from .errors import InvalidInput

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_V4_DENY: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", "this network"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "carrier-grade NAT"),
    ("127.0.0.0/8", "loopback"),
    # Public address space, but Azure's wire server (metadata, agent and DNS) on every VM.
    ("168.63.129.16/32", "Azure wire server (cloud metadata)"),
    ("169.254.0.0/16", "link-local (cloud metadata)"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "6to4 relay anycast"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
    ("255.255.255.255/32", "broadcast"),
)
# IPv4-mapped (::ffff:0:0/96) is not here: its embedded IPv4 address is checked instead.
_V6_DENY: tuple[tuple[str, str], ...] = (
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("::/96", "IPv4-compatible (deprecated)"),
    ("::ffff:0:0:0/96", "IPv4-translated"),
    ("64:ff9b::/96", "NAT64"),
    ("64:ff9b:1::/48", "local-use NAT64"),
    ("100::/64", "discard-only"),
    ("2001::/32", "Teredo"),
    ("2001:2::/48", "benchmarking"),
    ("2001:10::/28", "ORCHID"),
    ("2001:20::/28", "ORCHIDv2"),
    ("2001:db8::/32", "documentation"),
    ("2002::/16", "6to4"),
    ("3fff::/20", "documentation"),
    ("fc00::/7", "unique local (private)"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local (deprecated)"),
    ("ff00::/8", "multicast"),
)
DENY_TABLE: tuple[tuple[Network, str], ...] = tuple(
    (ipaddress.ip_network(net), reason) for net, reason in _V4_DENY + _V6_DENY
)
_MAPPED = ipaddress.ip_network("::ffff:0:0/96")

# One part of a legacy IPv4 form as inet_aton reads it: decimal, 0-octal or 0x-hex.
_LEGACY_PART = re.compile(r"0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*")


def denied_reason(address: IPAddress) -> str | None:
    """Why `address` is no place for a webhook, or None for a public address."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id:
            address = ipaddress.IPv6Address(address.packed)
        if address in _MAPPED:
            embedded = ipaddress.IPv4Address(address.packed[-4:])
            reason = denied_reason(embedded)
            return f"IPv4-mapped {reason}" if reason else None
    for network, reason in DENY_TABLE:
        if address.version == network.version and address in network:
            return reason
    return None


def normalise_host(host: str) -> str:
    """The host as a resolver would see it: NFKC (full-width digits), no brackets or final dot."""
    host = unicodedata.normalize("NFKC", host).replace("\u3002", ".").strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host[:-1] if host.endswith(".") and not host.endswith("..") else host


def ip_literal(host: str) -> IPAddress | None:
    """The address of a host written as a canonical IPv4 or IPv6 literal, else None."""
    try:
        return ipaddress.ip_address(normalise_host(host).replace("%25", "%"))
    except ValueError:
        return None


def legacy_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The address inet_aton reads in `2130706433`, `0x7f.1`, `0177.0.0.1`, `127.1`; else None."""
    parts = normalise_host(host).split(".")
    if not 1 <= len(parts) <= 4 or not all(_LEGACY_PART.fullmatch(p) for p in parts):
        return None
    values = [_legacy_value(p) for p in parts]
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (5 - len(values)):
        return None
    number = last
    for i, v in enumerate(head):
        number += v << (8 * (3 - i))
    return ipaddress.IPv4Address(number)


def _legacy_value(part: str) -> int:
    if part[:2].lower() == "0x":
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part[0] == "0":
        return int(part, 8)
    return int(part)


@dataclass(slots=True, frozen=True)
class AllowList:
    """Exceptions to the deny table: whole networks, or single address:port pairs."""

    networks: tuple[Network, ...] = ()
    endpoints: frozenset[tuple[IPAddress, int]] = frozenset()

    @classmethod
    def parse(cls, spec: str, field: str = "DISPATCHER_ALLOW_TARGETS") -> AllowList:
        """`127.0.0.0/8, ::1, 10.0.0.5:8443, [fd00::1]:443` (comma or space separated)."""
        networks: list[Network] = []
        endpoints: set[tuple[IPAddress, int]] = set()
        for i, item in enumerate(spec.replace(",", " ").split()):
            endpoint = _parse_endpoint(item)
            if endpoint is not None:
                endpoints.add(endpoint)
                continue
            try:
                networks.append(ipaddress.ip_network(item, strict=False))
            except ValueError as exc:
                raise InvalidInput(
                    f"{field}[{i}]", f"{item!r} is neither a CIDR, an address nor address:port"
                ) from exc
        return cls(tuple(networks), frozenset(endpoints))

    def allows(self, address: IPAddress, port: int) -> bool:
        if (address, port) in self.endpoints:
            return True
        return any(address.version == n.version and address in n for n in self.networks)

    def describe(self) -> str:
        items = [str(n) for n in self.networks]
        items += [f"[{a}]:{p}" if a.version == 6 else f"{a}:{p}" for a, p in sorted(self.endpoints, key=str)]
        return ", ".join(items) or "nothing"


def _parse_endpoint(item: str) -> tuple[IPAddress, int] | None:
    match = re.fullmatch(r"\[([0-9a-fA-F:.]+)\]:(\d+)|([0-9.]+):(\d+)", item)
    if match is None:
        return None
    host, port = (match[1], match[2]) if match[1] else (match[3], match[4])
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    return (address, int(port)) if 0 < int(port) < 65536 else None


@dataclass(slots=True, frozen=True)
class TargetPolicy:
    """The deny table, minus what the deployment allows."""

    allow: AllowList = AllowList()

    def refusal(self, address: IPAddress, port: int) -> str | None:
        """Why a connection to address:port is refused, or None when it may go ahead."""
        if self.allow.allows(address, port):
            return None
        reason = denied_reason(address)
        return f"{address} is {_article(reason)} address" if reason else None


def _article(reason: str) -> str:
    return ("an " if reason[0].lower() in "aeiou" else "a ") + reason


@dataclass(slots=True, frozen=True)
class Target:
    """Where a receiver URL points: a literal address, or a name to resolve at connect time."""

    host: str
    port: int
    address: IPAddress | None
    display_host: str = ""  # the host decoded from IDNA, to compare with other parsers


def parse_target(url: str, field: str = "url") -> Target:
    """The host and port aiohttp will dial for `url`; refuses legacy numeric and encoded hosts."""
    try:
        parsed = URL(url)
    except ValueError as exc:
        raise InvalidInput(field, f"is not a valid URL: {exc}") from exc
    raw = parsed.raw_host or ""
    if not raw:
        raise InvalidInput(field, "must include a host")
    host = normalise_host(raw)
    if "%" in raw and ":" not in raw:  # only an IPv6 zone may hold a percent sign
        raise InvalidInput(field, f"host {raw!r} must not be percent-encoded")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    address = ip_literal(raw)
    if address is None:
        legacy = legacy_ipv4(host)
        if legacy is not None:
            raise InvalidInput(
                field, f"host {raw!r} is a non-standard form of the address {legacy}; write it as {legacy}"
            )
    return Target(host, port, address, normalise_host(parsed.host or ""))


def check_literal_target(target: Target, policy: TargetPolicy, field: str = "url") -> None:
    """Refuse a URL whose host is an address the policy denies (names are checked on resolution)."""
    if target.address is None:
        return
    reason = policy.refusal(target.address, target.port)
    if reason:
        raise InvalidInput(field, f"not an allowed target: {reason}", code="forbidden_target")
