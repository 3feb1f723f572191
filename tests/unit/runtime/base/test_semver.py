"""Semantic version order (semver.org §11), which the OTA downgrade check relies on."""

from __future__ import annotations

import pytest

from edgebuild.runtime.base import semver

# semver.org §11's examples, in ascending order, and a few more
ASCENDING = ["0.9.9", "1.0.0-0.3.7", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta",
             "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.0.1", "1.2.0", "1.10.0", "2.0.0-rc.1",
             "2.0.0", "2.1.1", "10.0.0"]


def test_versions_sort_as_semver_says() -> None:
    for lower, higher in zip(ASCENDING, ASCENDING[1:]):
        assert semver.compare(lower, higher) == -1, (lower, higher)
        assert semver.compare(higher, lower) == 1, (higher, lower)
    assert sorted(reversed(ASCENDING), key=semver.parse) == ASCENDING


def test_build_metadata_does_not_take_part_in_the_order() -> None:
    assert semver.compare("1.0.0+20130313144700", "1.0.0") == 0
    assert semver.compare("1.0.0-beta+exp.sha.5114f85", "1.0.0-beta") == 0
    assert semver.compare("1.0.0+a", "1.0.0+b") == 0


@pytest.mark.parametrize("text", ["1", "1.0", "v1.0.0", "01.0.0", "1.00.0", "1.0.0-01", "1.0.0-", "1.0.0+",
                                  "1.0.0-a..b", "1.0.0 ", "latest", "1.0.0-é", "１.0.0", ""])
def test_not_semver(text: str) -> None:
    assert semver.parse(text) is None
    with pytest.raises(ValueError, match="is not a semantic version"):
        semver.compare(text, "1.0.0")


def test_valid_edge_cases() -> None:
    assert semver.parse("0.0.0") is not None and semver.parse("1.0.0-x-y-z.--") is not None
    assert semver.parse("1.0.0-0A.is.legal") is not None
    assert semver.compare("1.0.0-alpha-1", "1.0.0-alpha") == 1  # a hyphen inside an identifier
    assert semver.compare("1.0.0-2", "1.0.0-10") == -1  # numeric identifiers compare as numbers
    assert semver.compare("1.0.0-10", "1.0.0-a") == -1  # numeric below alphanumeric
    assert semver.compare("1.0.0-B", "1.0.0-a") == -1  # ASCII order
