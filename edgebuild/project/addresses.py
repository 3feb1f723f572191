"""Device addresses: the ``ssh://[user@]host[:port]`` form, checked in one place for the project
file (``build_on``), the command line (``--build-on``, ``--device``) and the SSH client."""

from __future__ import annotations

import re

__all__ = ["parse_ssh_url"]

_URL = re.compile(r"^ssh://(?:(?P<user>[A-Za-z0-9._-]+)@)?(?P<host>[A-Za-z0-9._-]+|\[[0-9A-Fa-f:]+\])"
                  r"(?::(?P<port>\d{1,5}))?/?$")


def parse_ssh_url(url: str) -> tuple[str | None, str, int | None]:
    """``ssh://[user@]host[:port]`` -> (user, host, port); raises ValueError with what is allowed."""
    match = _URL.match(url.strip())
    if not match:
        raise ValueError(f"{url!r} is not an ssh://[user@]host[:port] address")
    port = int(match.group("port")) if match.group("port") else None
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"{url!r}: port {port} is out of range")
    return match.group("user"), match.group("host").strip("[]"), port
