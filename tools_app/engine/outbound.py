"""Where outbound calls may go: the guard against server-side request forgery.

Whoever edits an endpoint (or, later, an HTTP tool) chooses a URL the server will call
with its own network position. Private, loopback, link-local (cloud metadata at
169.254.169.254 among them), shared, reserved, multicast and unspecified addresses are
refused unless the operator lists the host or a network containing the address;
loopback can be allowed on its own (local model servers such as Ollama, the offline
demo). The check is made on the address actually connected to: the resolver the client
connects with checks every address it returns (so a name that resolves to a private
address, or one that changes between two lookups, is caught), and a literal IP in the
URL is checked before the request. An IPv4 address hidden in an IPv6 one (mapped,
6to4, Teredo) is judged as that IPv4 address; a host written in an odd notation
(2130706433, 0x7f.1) is resolved like any name, and its address judged; HTTP tools
refuse such notations outright (`unusual_address_notation`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class OutboundRefused(OSError):
    """A destination the outbound policy refuses. An OSError, so a resolver may raise
    it where a failed lookup would raise; never worth a retry."""

    def __init__(self, host: str, address: str, reason: str) -> None:
        super().__init__(
            f"refused to connect to {host} ({address}: {reason}); private, loopback, "
            "link-local and metadata addresses are blocked unless the operator allows "
            "them (AGENTFORGE_OUTBOUND_ALLOW)")
        self.host, self.address, self.reason = host, address, reason


class OutboundRefusedError(httpx.ConnectError):
    """An OutboundRefused as httpx reports a failed connection: never retried."""


@dataclass(frozen=True)
class OutboundPolicy:
    """`allow`: host names (exact, any case) and addresses or networks in CIDR notation
    the operator trusts; `allow_loopback`: loopback addresses too."""

    allow: tuple[str, ...] = ()
    allow_loopback: bool = False
    _hosts: frozenset[str] = field(init=False, repr=False, compare=False)
    _networks: tuple[IPNetwork, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        hosts, networks = _split(self.allow)
        object.__setattr__(self, "_hosts", hosts)
        object.__setattr__(self, "_networks", networks)

    def check(self, host: str, address: str) -> None:
        """Raise OutboundRefused unless connecting to `address` (for `host`) is allowed."""
        reason = self.refusal(host, address)
        if reason is not None:
            raise OutboundRefused(host, address, reason)

    def refusal(self, host: str, address: str) -> str | None:
        """Why connecting to `address` for `host` is refused, or None."""
        if host.lower().rstrip(".") in self._hosts:
            return None
        try:
            ip = _effective(ipaddress.ip_address(address.split("%", 1)[0]))
        except ValueError:
            return "not an IP address"
        if any(ip in network for network in self._networks):
            return None
        if ip.is_loopback:
            return None if self.allow_loopback else "loopback"
        if ip.is_global and not ip.is_multicast:
            return None
        return _kind(ip)


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return False
    return True


_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$", re.IGNORECASE)


def unusual_address_notation(host: str) -> bool:
    """Whether `host` spells an IPv4 address in a notation other than four decimal
    numbers (2130706433, 0x7f.1, 127.1, 0177.0.0.1): resolvers accept these and reach
    the address they spell, and nobody writes them but someone getting round a filter.
    A trailing dot does not make a canonical address unusual."""
    bare = host.strip().rstrip(".")
    labels = bare.split(".")
    if not bare or not all(_NUMERIC_LABEL.match(label) for label in labels):
        return False  # a name (or an IPv6 literal)
    try:
        return str(ipaddress.IPv4Address(bare)) != bare
    except ValueError:
        return True


def _split(allow: Iterable[str]) -> tuple[frozenset[str], tuple[IPNetwork, ...]]:
    hosts: set[str] = set()
    networks: list[IPNetwork] = []
    for entry in allow:
        entry = entry.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            hosts.add(entry.lower().rstrip("."))
    return frozenset(hosts), tuple(networks)


def _effective(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, Teredo), else `ip`."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip.sixtofour is not None:
            return ip.sixtofour
        if ip.teredo is not None:
            return ip.teredo[1]
    return ip


def _kind(ip: IPAddress) -> str:
    if ip.is_link_local:
        return "link-local (cloud metadata lives here)"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_multicast:
        return "multicast"
    if ip.is_reserved:
        return "reserved"
    if ip.is_private:
        return "private"
    return "not a public address"
