"""The perceptual hash (numpy, :func:`mewdex.inference.visual_model.phash_hex`) gives the very hashes
``imagehash.phash`` (4.3.2, SciPy's DCT) gave before mewdex dropped it, so the hashes stored by earlier
versions still compare (near-duplicates, ``phash_distance``) and nothing needs re-hashing on upgrade.

``tests/cases/phash_reference.json`` holds the hashes imagehash computed, once, through the stage's own
path (``phash_of(decode_for_visual(bytes))``) for the synthetic edge cases below (flat, 1×1, tiny,
gradients, mirror-symmetric and checkerboard images whose DCT has exact ties at the median, alpha,
palette with transparency, 16-bit grey, an animation's first frame, a large image shrunk first; all PNG
or GIF, lossless, so no encoder's version changes their pixels; CMYK is a case file),
for the image files of ``tests/cases`` and for every image of the shared corpus (checked by
``tests/integration/test_phash_corpus.py``: 939 images, half a minute).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mewdex.inference import visual_model
from mewdex.library import thumbnails as th

CASES = Path(__file__).resolve().parents[1] / "cases"
REFERENCE = json.loads((CASES / "phash_reference.json").read_text(encoding="utf-8"))
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".webp"}


def stage_phash(data: bytes) -> str:
    """The hash the visual stage stores for these bytes."""
    return visual_model.phash_of(th.decode_for_visual(data))


def _noise(h: int, w: int, seed: int) -> np.ndarray:
    """Deterministic pseudo-random bytes (integer arithmetic only: the same on every numpy)."""
    y, x = np.indices((h, w), dtype=np.uint64)
    v = (x * np.uint64(2654435761) + y * np.uint64(40503) + np.uint64(seed) * np.uint64(97)) % np.uint64(1 << 32)
    return ((v * v) >> np.uint64(13) & np.uint64(255)).astype(np.uint8)


def _png(im: Image.Image, fmt: str = "PNG", **params) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **params)
    return buf.getvalue()


def _mirror() -> bytes:
    half = _noise(64, 32, 5)
    return _png(Image.fromarray(np.concatenate([half, half[:, ::-1]], axis=1)))


def _alpha() -> bytes:
    rgb = np.stack([_noise(80, 120, 1), _noise(80, 120, 2), _noise(80, 120, 3)], axis=-1)
    alpha = np.tile(np.linspace(0, 255, 120).astype(np.uint8), (80, 1))[..., None]
    return _png(Image.fromarray(np.concatenate([rgb, alpha], axis=-1), "RGBA"))


def _palette() -> bytes:
    im = Image.fromarray((_noise(90, 70, 4) // 32).astype(np.uint8), "L").convert("P")
    im.putpalette([c for i in range(8) for c in (i * 32, 255 - i * 32, (i * 80) % 256)])
    return _png(im, transparency=3)


def _gray16() -> bytes:
    ramp = (np.add.outer(np.arange(64), np.arange(96)) * 400).astype(np.uint16)
    return _png(Image.fromarray(ramp))  # mode I;16


def _animated() -> bytes:
    first = Image.fromarray(_noise(60, 60, 6))  # grey ("L"): GIF keeps it as is, no quantising
    second = Image.fromarray(_noise(60, 60, 7))
    return _png(first, "GIF", save_all=True, append_images=[second], duration=100, loop=0)


SYNTHETIC: dict[str, Callable[[], bytes]] = {
    "flat_white": lambda: _png(Image.new("RGB", (100, 100), "white")),
    "flat_black": lambda: _png(Image.new("RGB", (100, 100), "black")),
    "flat_grey_1x1": lambda: _png(Image.new("RGB", (1, 1), (128, 128, 128))),
    "tiny_3x2": lambda: _png(Image.fromarray(_noise(2, 3, 8)).convert("RGB")),
    "gradient_horizontal": lambda: _png(Image.fromarray(np.tile(np.arange(256, dtype=np.uint8), (64, 1)))),
    "gradient_vertical": lambda: _png(Image.fromarray(np.tile(np.arange(256, dtype=np.uint8), (64, 1)).T.copy())),
    "two_halves": lambda: _png(Image.fromarray(np.repeat(np.array([[0, 255]], np.uint8), 50, axis=1).repeat(50, 0))),
    "checkerboard": lambda: _png(Image.fromarray((np.indices((64, 64)).sum(0) % 2 * 255).astype(np.uint8))),
    "mirror_symmetric": _mirror,
    "noise": lambda: _png(Image.fromarray(_noise(300, 500, 9)).convert("RGB")),
    "alpha_gradient": _alpha,
    "palette_transparent": _palette,
    "gray16_ramp": _gray16,
    "animated_first_frame": _animated,
    "large_shrunk_first": lambda: _png(Image.fromarray(_noise(700, 1000, 11)).convert("RGB")),
}


def case_files() -> list[Path]:
    return sorted(p for p in CASES.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.name in REFERENCE["cases"])


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_synthetic_edge_cases_hash_as_imagehash_did(name):
    assert stage_phash(SYNTHETIC[name]()) == REFERENCE["synthetic"][name]


def test_case_files_hash_as_imagehash_did():
    got = {p.name: stage_phash(p.read_bytes()) for p in case_files()}
    assert len(got) == len(REFERENCE["cases"]) >= 10
    assert got == REFERENCE["cases"]


def test_hash_bits_read_row_by_row_most_significant_first():
    """The bit order of imagehash's hex: the 8×8 low-frequency block row by row, the first bit the
    highest. A left-bright/right-dark image has its horizontal-frequency bits set in the top row."""
    left_bright = np.zeros((64, 64), np.uint8)
    left_bright[:, :32] = 255
    h = int(visual_model.phash_hex(Image.fromarray(left_bright).convert("RGB")), 16)
    top_row = h >> 56
    assert top_row & 0b1100_0000 == 0b1100_0000 and h & 0xFF == 0
