"""Every image of the shared corpus hashes (numpy, :func:`mewdex.inference.visual_model.phash_hex`) as
``imagehash.phash`` did before mewdex dropped it: the hashes imagehash computed through the visual stage's
own path are in ``tests/cases/phash_reference.json`` (see ``tests/unit/test_phash_reference.py`` for the
synthetic edge cases and the case files). No database; here because it decodes 939 images."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import CORPUS
from mewdex.inference import visual_model
from mewdex.library import thumbnails as th

REFERENCE = json.loads((Path(__file__).resolve().parents[1] / "cases" / "phash_reference.json").read_text())


@pytest.mark.corpus
def test_every_corpus_image_hashes_as_imagehash_did():
    expected = REFERENCE["corpus"]
    if not all((CORPUS / rel).is_file() for rel in expected):
        pytest.skip(f"corpus not found at {CORPUS} (set MEWDEX_CORPUS)")
    got = {rel: visual_model.phash_of(th.decode_for_visual((CORPUS / rel).read_bytes())) for rel in expected}
    differ = {rel: (h, expected[rel]) for rel, h in got.items() if h != expected[rel]}
    assert len(got) >= 900 and not differ
