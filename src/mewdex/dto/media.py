"""The meme formats mewdex stores: the one list every layer reads — the search ``formats`` filter, the
decoder's extensions and content types (``library.images``), the name rules (``library.names``) and
the ``memes`` CHECK constraint (``db.models.library``; a format added here needs its migration, which
the schema contract test asks for) — and what kind of meme a format makes on a page (its badge)."""

from __future__ import annotations

from typing import Literal, get_args

#: A format's key, as the decoder sniffs it from the bytes and the search filter names it.
MediaFormat = Literal["png", "jpeg", "gif", "webp", "avif", "heic", "mp4", "webm", "tgs"]
FORMATS: tuple[str, ...] = get_args(MediaFormat)
#: ``{format: stored extension}`` (lower case, leading dot; ``jpeg`` is stored as ``.jpg``).
EXTENSIONS: dict[str, str] = {f: ".jpg" if f == "jpeg" else f".{f}" for f in FORMATS}
#: Clips (MP4, WebM: a browser plays them in a ``<video>``) and animated stickers (TGS): always moving.
CLIP_FORMATS = frozenset({"mp4", "webm"})
STICKER_FORMATS = frozenset({"tgs"})
MOVING_EXTENSIONS: tuple[str, ...] = tuple(EXTENSIONS[f] for f in FORMATS if f in CLIP_FORMATS | STICKER_FORMATS)

MediaKind = Literal["gif", "clip", "sticker"]


def media_kind(extension: str, animated: bool) -> MediaKind | None:
    """The badge of a meme stored with ``extension`` (``".webm"``): ``"clip"`` (MP4, WebM), ``"sticker"``
    (TGS), ``"gif"`` (any other animated format: GIF, animated WEBP or AVIF) or None (a still)."""
    fmt = next((f for f, ext in EXTENSIONS.items() if ext == extension), None)
    if fmt in CLIP_FORMATS:
        return "clip"
    if fmt in STICKER_FORMATS:
        return "sticker"
    return "gif" if animated else None
