"""ssh:// device URLs (edgebuild.project.addresses): the forms accepted, and those refused."""

from __future__ import annotations

import pytest

from edgebuild.project.addresses import parse_ssh_url


@pytest.mark.parametrize("url, parsed", [
    ("ssh://nvidia@orin-01", ("nvidia", "orin-01", None)),
    ("ssh://orin-01.lan:2222", (None, "orin-01.lan", 2222)),
    ("ssh://root@[::1]:22", ("root", "::1", 22)),
])
def test_ssh_urls(url: str, parsed: tuple) -> None:
    assert parse_ssh_url(url) == parsed


@pytest.mark.parametrize("url", ["nvidia@orin-01", "ssh://", "ssh://a b", "ssh://host:99999", "ssh://h; rm -rf /"])
def test_bad_ssh_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError, match="ssh://"):
        parse_ssh_url(url)
