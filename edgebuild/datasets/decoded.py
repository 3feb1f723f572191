"""Every image of a set decoded once, as the stages decode it, with what was found remembered by content.

``check`` decodes every validation and calibration image (not a sample) with ``images.read_image``'s
decoder, so a broken file is found before a stage reads it, and says once per set what the reader did
to the images that needed it (EXIF orientation applied, 16-bit scaled, alpha dropped, ...). What one
file decoded to (its size, those traits, or why it cannot be read) is kept by the SHA-256 of its bytes
in a JSON file in the build folder (``BuildLayout.decoded_images``), so a second ``check`` decodes
nothing that has not changed. The cache is written atomically (a temporary file renamed over it); a
cache that cannot be read or written is ignored: it only saves time.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from edgebuild.datasets.images import decode_traits
from edgebuild.errors import DataError
from edgebuild.runtime.base.files import atomic_write_text

__all__ = ["decode_all"]

#: bump when what a decode records changes, so an old cache is not trusted
CACHE_VERSION = 1
#: sets with at least this many images show a progress bar (on a terminal)
PROGRESS_FROM = 200

_SAID = {
    "exif": "have an EXIF orientation, applied as Ultralytics does (cv2.imread): boxes are read on the upright "
            "image, as labelling tools show it",
    "16-bit": "are 16-bit, scaled to 8 bits by their high byte as cv2.imread reads them (not clipped)",
    "alpha": "have an alpha channel (transparency), dropped as cv2.imread drops it (not blended)",
    "palette": "are palette images, expanded to RGB",
    "gray": "are grayscale, read as three equal channels",
}


@dataclass
class Decoded:
    """What decoding a set's images found: the problems (one message per broken image), the images of
    each trait, and how many were decoded now (the rest came from the cache)."""

    images: int = 0
    problems: list[str] = field(default_factory=list)
    traits: Counter[str] = field(default_factory=Counter)
    decoded_now: int = 0

    def notes(self, gray: bool = False) -> list[str]:
        """One sentence per trait: ``12 of 60 images have an EXIF orientation, applied as ...``."""
        shown = [t for t in _SAID if self.traits.get(t) and not (gray and t == "gray")]
        return [f"{self.traits[t]} of {self.images} images {_SAID[t]}" for t in shown]


def _load(cache: Path | None) -> dict[str, dict[str, object]]:
    if cache is None:
        return {}
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION or not isinstance(data.get("files"), dict):
        return {}
    return {k: v for k, v in data["files"].items() if isinstance(v, dict)}


def _save(cache: Path, entries: dict[str, dict[str, object]]) -> None:
    try:
        atomic_write_text(cache, json.dumps({"version": CACHE_VERSION, "files": entries}))
    except OSError:
        pass  # a cache that cannot be written only costs time


def _entry(path: Path) -> dict[str, object]:
    try:
        size, traits = decode_traits(path)
    except DataError as exc:
        return {"problem": exc.message.removeprefix(f"{path}: cannot read image: ")}
    return {"size": list(size), "traits": sorted(traits)}


def decode_all(paths: list[Path], cache: Path | None = None, desc: str = "decode") -> Decoded:
    """Decode every one of ``paths`` (each distinct file once) unless the cache knows its bytes."""
    from tqdm import tqdm

    from edgebuild.content import file_sha256

    known = _load(cache)
    result = Decoded(images=len(paths))
    unique = list(dict.fromkeys(paths))
    bar = tqdm(total=len(unique), desc=desc, unit="img", leave=False,
               disable=None if len(unique) >= PROGRESS_FROM else True)
    changed = False
    try:
        for path in unique:
            try:
                digest = file_sha256(path)
            except OSError as exc:
                result.problems.append(f"{path}: cannot read image: {exc.strerror or exc}")
                bar.update()
                continue
            entry = known.get(digest)
            if entry is None:
                entry = known[digest] = _entry(path)
                result.decoded_now += 1
                changed = True
            if entry.get("problem"):
                result.problems.append(f"{path}: cannot read image: {entry['problem']}")
            else:
                result.traits.update(str(t) for t in entry.get("traits", ()))  # type: ignore[attr-defined]
            bar.update()
    finally:
        bar.close()
    if cache is not None and changed:
        _save(cache, known)
    return result
