"""Which `Host` and `Origin` headers the server answers: DNS-rebinding protection for every face.

A web page whose name an attacker resolves to the server's address (127.0.0.1 on a developer's machine) sends
requests the browser considers its own, with `Host: attacker.example`; and any page can send requests to
loopback carrying its own `Origin`. Without an API key either could create sessions and run tools. So every
request but `/health` must name an allowed host, and a browser's `Origin`, when present, must be one too:

- loopback names (`localhost`, `127.0.0.1`, `[::1]`) with any port or none;
- the bind host (`--host`) with any port, when it is a specific address or name;
- every `--allowed-host` entry: `name:port` exactly, `name` without a port, or `name:*` for any port.

Names compare case-insensitively. The rules are the MCP SDK's (`TransportSecuritySettings`), applied once in
the entry (`ors_server.http.entry`) for every face, WebSockets included.
"""

from __future__ import annotations

from ors_server.settings import Settings

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
_ANY_ADDRESS = ("0.0.0.0", "::", "")


class AllowedHosts:
    def __init__(self, settings: Settings) -> None:
        names = list(LOOPBACK_HOSTS)
        if settings.host not in (*_ANY_ADDRESS, *LOOPBACK_HOSTS):
            names.append(settings.host)
        exact: set[str] = set(names)
        any_port: set[str] = set(names)
        for entry in settings.allowed_hosts:
            if entry.endswith(":*"):
                any_port.add(entry[:-2])
            else:
                exact.add(entry)
        self.exact = {host.lower() for host in exact}
        self.any_port = {name.lower() for name in any_port}

    def allows_host(self, host: str) -> bool:
        host = host.lower()
        if host in self.exact:
            return True
        name, port = _split_port(host)
        return port.isdigit() and name in self.any_port

    def allows_origin(self, origin: str) -> bool:
        """An `Origin` (`scheme://host[:port]`) is allowed if its host is (a sandboxed page's "null" is not)."""
        scheme, sep, host = origin.partition("://")
        return bool(sep) and scheme.lower() in ("http", "https") and "/" not in host and self.allows_host(host)

    def patterns(self) -> list[str]:
        """The same list in the MCP SDK's terms (`name`, `name:*`)."""
        return sorted(self.exact) + sorted(f"{name}:*" for name in self.any_port)


def _split_port(host: str) -> tuple[str, str]:
    """("name", "port") of "name:port"; an IPv6 literal keeps its brackets; port "" if there is none."""
    if host.startswith("["):
        end = host.find("]")
        name, rest = host[: end + 1], host[end + 1 :]
        return name, rest[1:] if rest.startswith(":") else ""
    name, _, port = host.rpartition(":")
    return (name, port) if name else (host, "")
