"""Helpers for the collection and package tests: small real images, error codes, corpus files."""

from __future__ import annotations

import io

from PIL import Image


def png(color: tuple[int, int, int], size: tuple[int, int] = (8, 8)) -> bytes:
    """A small real PNG of one colour (different colours → different bytes)."""
    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="PNG")
    return out.getvalue()


def add(sessions, store, scope, data: bytes, name: str) -> str:
    """Add an image to the scope without processing; returns the meme id."""
    from mewdex.library.memes import add_image

    result = add_image(sessions, store, scope, data, filename=name, provenance={"source": "test"}, process=False)
    assert result.meme_id, result
    return result.meme_id


def error_code(response) -> str:
    body = response.json()
    assert set(body) == {"error"} and {"code", "message", "details"} <= set(body["error"]), body
    return body["error"]["code"]


def corpus_images(corpus, n: int) -> list:
    """The first ``n`` image files of the corpus (sorted per source, sources in a fixed order)."""
    files = []
    for source in ("vvquest", "memegen", "chinesebqb"):
        root = corpus / source / "images"
        files += sorted(p for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))
    return files[: n * 2]  # a margin for corpus files that are duplicates of others
