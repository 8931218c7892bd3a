"""Thumbnails: a still WEBP (longest side 256) for every meme and an animated WEBP preview
(longest side 320) for animated ones, stored content-addressed (``<sha256>.webp``) in the scope's
thumbnail namespace — a UUID derived from the scope's ``storage_namespace`` (:func:`thumbnail_namespace`),
so derived files never mix with, or get deleted together with, originals — and recorded as
``derived_image_thumbnails`` rows bound to the source sha256 + size and a profile.

Row states: ``pending`` (wanted, not built), ``available`` (``output_key`` is in the blob store),
``failed`` (the source could not be thumbnailed; ``diagnostic`` says why), ``stale`` (bound to
content the meme no longer has, or its blob has gone; :func:`reconcile` rebuilds it).

Decoding goes through :mod:`mewdex.library.images` (sniffing, pixel limits, EXIF orientation,
16-bit grey scaling, frame compositing). WEBP outputs keep transparency; JPEG-like outputs (and
model inputs, which use :func:`mewdex.library.images.load_frames`) are composited onto white.
Derived files never carry EXIF/ICC/XMP (so no orientation tag).
"""

from __future__ import annotations

import hashlib
import io
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from PIL import Image
from sqlalchemy import select
from sqlalchemy.orm import Session

from mewdex.library import images
from mewdex.library.images import ImageError
from mewdex.storage.blobs import thumbnail_namespace

log = logging.getLogger(__name__)

STILL_PROFILE = "still-webp-256-v1"
ANIMATED_PROFILE = "animated-webp-320-v1"
PROFILES = {STILL_PROFILE: 256, ANIMATED_PROFILE: 320}
STILL_QUALITY = 80
ANIMATED_QUALITY = 70
MAX_PREVIEW_FRAMES = 48
MEDIA_TYPE = "image/webp"
_WHITE = (255, 255, 255)


@dataclass(frozen=True)
class Thumbnail:
    """Encoded thumbnail bytes and their facts; ``key`` is the blob key ``<sha256>.webp``."""

    profile: str
    data: bytes
    width: int
    height: int
    media_type: str = MEDIA_TYPE
    frames: int = 1

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def key(self) -> str:
        return f"{self.sha256}.webp"


# ---------------------------------------------------------------- decoding (alpha kept)


def iter_rgba_frames(
    data: bytes,
    *,
    max_pixels: int = images.DEFAULT_MAX_PIXELS,
    max_frames: int | None = None,
    fit: int | None = None,
) -> Iterator[tuple[Image.Image, int]]:
    """Yield ``(frame, duration_ms)``: upright RGBA (RGB when opaque) frames, transparency kept, fully composited.

    Uses the decode module's own guards (format sniffing, pixel limits checked before each
    frame is decoded, every decoder failure mapped to :class:`ImageError`). ``max_frames``
    stops after that many frames; ``fit`` shrinks each frame (longest side) as it is decoded,
    so a long animation never holds full-size copies of all its frames.

    NOTE for the lead: this belongs in :mod:`mewdex.library.images` as a public
    ``load_frames(..., alpha=True)``; it uses that module's private helpers so that there is
    still only one decoder.
    """
    fmt = images._require_format(data)
    out: list[tuple[Image.Image, int]] = []
    with images._guard():
        with images._open(data, fmt, max_pixels) as im:
            if fit and fmt == "jpeg":
                im.draft(None, (fit, fit))  # DCT-domain downscale (≥ fit on each side): far less to decode
            for index, frame in enumerate(images._iter_frames(im, max_pixels, images.DEFAULT_MAX_TOTAL_PIXELS)):
                rgba = _to_rgba(frame)
                out.append((_resize(rgba, fit) if fit else rgba, images._frame_duration(frame)))
                if max_frames is not None and index + 1 >= max_frames:
                    break
            im.seek(0)
            method = images._TRANSPOSE.get(images._orientation(im))
    for frame, duration in out:
        yield (frame.transpose(method) if method else frame), duration


@dataclass
class DecodedVisual:
    """One decoding pass for the visual stage.

    ``model_frames``: exactly what ``images.load_frames(data, indices="spread4")`` returns (upright
    RGB on white, full size; the same conversion function), ``preview``: ``(frame, duration_ms)``
    of every frame (≤ 4 × MAX_PREVIEW_FRAMES), shrunk to the animated profile, transparency kept.
    """

    model_frames: list[Image.Image]
    preview: list[tuple[Image.Image, int]]
    frames: int


def decode_for_visual(
    data: bytes, *, max_pixels: int = images.DEFAULT_MAX_PIXELS, first_frame: bool = False
) -> DecodedVisual:
    """Decode once for both the model inputs and the thumbnails (animations are decoded frame by
    frame only once instead of twice). ``first_frame``: stop after the first frame (``model_frames``
    and ``preview`` hold it alone, exactly as the whole decoding's first: what the perceptual hash
    reads). Raises :class:`ImageError`."""
    fmt = images._require_format(data)
    fit = PROFILES[ANIMATED_PROFILE]
    model_frames: list[Image.Image] = []
    preview: list[tuple[Image.Image, int]] = []
    with images._guard():
        with images._open(data, fmt, max_pixels) as im:
            n_frames = getattr(im, "n_frames", 1)
            wanted = [0] if first_frame else images.select_frame_indices(n_frames, "spread4")
            last = 1 if first_frame else min(n_frames, 4 * MAX_PREVIEW_FRAMES)
            for index, frame in enumerate(images._iter_frames(im, max_pixels, images.DEFAULT_MAX_TOTAL_PIXELS)):
                rgb = images._to_rgb(frame) if index in wanted else None
                if rgb is not None:
                    model_frames.append(rgb)
                if index < 4 * MAX_PREVIEW_FRAMES:
                    # an opaque frame is converted once
                    shown = rgb if rgb is not None and not _has_alpha(frame) else _to_rgba(frame)
                    preview.append((_resize(shown, fit), images._frame_duration(frame)))
                if index >= max(wanted) and index + 1 >= last:
                    break
            im.seek(0)
            method = images._TRANSPOSE.get(images._orientation(im))
    if method:
        model_frames = [f.transpose(method) for f in model_frames]
        preview = [(f.transpose(method), d) for f, d in preview]
    return DecodedVisual(model_frames, preview, n_frames)


def thumbnails_from(decoded: DecodedVisual) -> list[Thumbnail]:
    """The still (from the full-size first frame) and, when animated, the preview."""
    out = [make_still(b"", frame=decoded.preview[0][0])]
    if len(decoded.preview) > 1:
        out.append(make_animated(decoded.preview))
    return out


def _has_alpha(frame: Image.Image) -> bool:
    return frame.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in frame.info


def _to_rgba(frame: Image.Image) -> Image.Image:
    """RGBA when the frame can be transparent, else RGB (cheaper to resize and encode)."""
    if frame.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N"):
        frame = images._wide_grey_to_l(frame)
    if _has_alpha(frame):
        out = frame.convert("RGBA")
    else:
        out = frame.convert("RGB")
    out.info = {}
    return out


def flatten_white(image: Image.Image) -> Image.Image:
    """Composite onto white and return RGB (for JPEG-like outputs)."""
    if image.mode == "RGB":
        return image
    rgba = image.convert("RGBA")
    out = Image.new("RGBA", rgba.size, _WHITE + (255,))
    out.alpha_composite(rgba)
    return out.convert("RGB")


def _fit(size: tuple[int, int], longest: int) -> tuple[int, int]:
    w, h = size
    scale = min(1.0, longest / max(w, h))
    return max(1, round(w * scale)), max(1, round(h * scale))


def _resize(image: Image.Image, longest: int) -> Image.Image:
    target = _fit(image.size, longest)
    if target == image.size:
        return image
    if image.mode == "RGBA":  # premultiply so transparent pixels' hidden colour does not bleed
        return image.convert("RGBa").resize(target, Image.Resampling.LANCZOS, reducing_gap=2.0).convert("RGBA")
    return image.resize(target, Image.Resampling.LANCZOS, reducing_gap=2.0)


def _opaque(image: Image.Image) -> Image.Image:
    """Drop an alpha channel that is fully opaque (smaller files)."""
    if image.mode == "RGBA" and image.getchannel("A").getextrema()[0] == 255:
        return image.convert("RGB")
    return image


# ---------------------------------------------------------------- building


def make_still(
    data: bytes, *, max_pixels: int = images.DEFAULT_MAX_PIXELS, frame: Image.Image | None = None
) -> Thumbnail:
    """The still WEBP of the first frame, longest side ≤ 256, transparency kept, no metadata.

    ``frame``: the already decoded first RGBA frame (saves a decode). Raises :class:`ImageError`.
    """
    if frame is None:
        frame = next(iter_rgba_frames(data, max_pixels=max_pixels, max_frames=1))[0]
    small = _opaque(_resize(frame, PROFILES[STILL_PROFILE]))
    buf = io.BytesIO()
    small.save(buf, "WEBP", quality=STILL_QUALITY, method=4)
    return Thumbnail(STILL_PROFILE, buf.getvalue(), small.width, small.height)


def make_animated(frames: list[tuple[Image.Image, int]]) -> Thumbnail:
    """An animated WEBP preview (longest side ≤ 320) of decoded ``(RGBA frame, duration_ms)`` pairs.

    At most :data:`MAX_PREVIEW_FRAMES` frames are kept (evenly spaced; each kept frame takes the
    duration of the frames it stands for, so the total time is preserved).
    """
    if len(frames) > MAX_PREVIEW_FRAMES:
        step = len(frames) / MAX_PREVIEW_FRAMES
        picked = []
        for i in range(MAX_PREVIEW_FRAMES):
            lo, hi = int(i * step), int((i + 1) * step)
            picked.append((frames[lo][0], sum(d for _, d in frames[lo:hi])))
        frames = picked
    longest = PROFILES[ANIMATED_PROFILE]
    small = [_resize(f, longest) for f, _ in frames]
    durations = [max(10, int(d)) for _, d in frames]
    buf = io.BytesIO()
    small[0].save(
        buf,
        "WEBP",
        save_all=True,
        append_images=small[1:],
        duration=durations,
        loop=0,
        quality=ANIMATED_QUALITY,
        method=0,
        minimize_size=False,
    )
    return Thumbnail(ANIMATED_PROFILE, buf.getvalue(), small[0].width, small[0].height, frames=len(small))


def make_thumbnails(data: bytes, *, max_pixels: int = images.DEFAULT_MAX_PIXELS) -> list[Thumbnail]:
    """The still thumbnail, plus the animated preview when the image has more than one frame."""
    frames = list(
        iter_rgba_frames(data, max_pixels=max_pixels, max_frames=4 * MAX_PREVIEW_FRAMES, fit=PROFILES[ANIMATED_PROFILE])
    )
    out = [make_still(data, frame=frames[0][0])]
    if len(frames) > 1:
        out.append(make_animated(frames))
    return out


# ---------------------------------------------------------------- rows and blobs


def store_thumbnails(
    session: Session, store, namespace: str, meme, thumbnails: list[Thumbnail], *, failure: ImageError | None = None
) -> None:
    """Write thumbnail blobs (into ``thumbnail_namespace(namespace)``; ``namespace`` is the scope's
    ``storage_namespace``) and upsert their rows for the meme's current content.

    Rows of other profiles/sources of the meme are marked ``stale``. With ``failure`` (the source
    could not be thumbnailed) a ``failed`` still row records the diagnostic.
    """
    from mewdex.db.models import DerivedImageThumbnail, utcnow

    existing = {
        (r.source_sha256, r.source_size_bytes, r.profile): r
        for r in session.execute(
            select(DerivedImageThumbnail).where(
                DerivedImageThumbnail.scope_id == meme.scope_id, DerivedImageThumbnail.meme_id == meme.id
            )
        ).scalars()
    }
    current = {(meme.sha256, meme.size_bytes, t.profile) for t in thumbnails}
    if failure is not None:
        current.add((meme.sha256, meme.size_bytes, STILL_PROFILE))
    row: DerivedImageThumbnail | None
    for ident, row in existing.items():
        if ident not in current and row.status != "stale":
            row.status = "stale"
    for thumb in thumbnails:
        store.put(thumbnail_namespace(namespace), thumb.key, thumb.data)
        ident = (meme.sha256, meme.size_bytes, thumb.profile)
        row = existing.get(ident)
        if row is None:
            row = DerivedImageThumbnail(
                scope_id=meme.scope_id,
                meme_id=meme.id,
                source_sha256=meme.sha256,
                source_size_bytes=meme.size_bytes,
                profile=thumb.profile,
            )
            session.add(row)
        row.output_key = thumb.key
        row.output_sha256 = thumb.sha256
        row.output_size_bytes = len(thumb.data)
        row.width, row.height = thumb.width, thumb.height
        row.media_type = thumb.media_type
        row.status = "available"
        row.diagnostic = {"frames": thumb.frames} if thumb.frames > 1 else None
        row.generated_at = utcnow()
    if failure is not None:
        ident = (meme.sha256, meme.size_bytes, STILL_PROFILE)
        row = existing.get(ident)
        if row is None:
            row = DerivedImageThumbnail(
                scope_id=meme.scope_id,
                meme_id=meme.id,
                source_sha256=meme.sha256,
                source_size_bytes=meme.size_bytes,
                profile=STILL_PROFILE,
            )
            session.add(row)
        row.status = "failed"
        row.output_key = row.output_sha256 = row.media_type = None
        row.output_size_bytes = row.width = row.height = None
        row.diagnostic = {"code": failure.code, "message": failure.message}
    session.flush()


def current_thumbnail(session: Session, meme, profile: str):
    """The ``available`` row of ``profile`` bound to the meme's current content, or None."""
    from mewdex.db.models import DerivedImageThumbnail

    return session.execute(
        select(DerivedImageThumbnail).where(
            DerivedImageThumbnail.scope_id == meme.scope_id,
            DerivedImageThumbnail.meme_id == meme.id,
            DerivedImageThumbnail.source_sha256 == meme.sha256,
            DerivedImageThumbnail.source_size_bytes == meme.size_bytes,
            DerivedImageThumbnail.profile == profile,
            DerivedImageThumbnail.status == "available",
        )
    ).scalar_one_or_none()


def thumbnail_statuses(session: Session, memes: list) -> dict[Any, dict[str, Any]]:
    """``{meme_id: {profile: status}}`` of the current-content thumbnail rows of memes of one scope
    (for the meme JSON), in one statement."""
    from mewdex.db.models import DerivedImageThumbnail

    out: dict[Any, dict[str, Any]] = {m.id: {} for m in memes}
    if not memes:
        return out
    current = {m.id: m.sha256 for m in memes}
    rows = session.execute(
        select(
            DerivedImageThumbnail.meme_id,
            DerivedImageThumbnail.source_sha256,
            DerivedImageThumbnail.profile,
            DerivedImageThumbnail.status,
        ).where(
            DerivedImageThumbnail.scope_id == memes[0].scope_id,
            DerivedImageThumbnail.meme_id.in_(list(current)),
        )
    ).all()
    for meme_id, sha256, profile, status in rows:
        if current.get(meme_id) == sha256:
            out[meme_id][profile] = status
    return out


def needs_rebuild(session: Session, store, namespace: str, meme, animated: bool | None) -> bool:
    """True when the still (or, for an animated meme, the preview) is missing, stale, pending or its blob has gone."""
    wanted = [STILL_PROFILE] + ([ANIMATED_PROFILE] if animated else [])
    for profile in wanted:
        row = current_thumbnail(session, meme, profile)
        if row is None or not row.output_key or not store.exists(thumbnail_namespace(namespace), row.output_key):
            return True
    return False


@dataclass
class ReconcileReport:
    checked: int = 0
    rebuilt: int = 0
    failed: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"checked": self.checked, "rebuilt": self.rebuilt, "failed": self.failed}


def reconcile(
    sessions, store, scope_id: str, *, max_pixels: int = images.DEFAULT_MAX_PIXELS, force: bool = False, progress=None
) -> ReconcileReport:
    """Rebuild every missing, stale, pending or blob-less thumbnail of the scope (``mewdex thumbnails reconcile``).

    One short transaction per meme; the slow encode happens outside it. ``force`` rebuilds all.
    ``progress(meme_id, outcome)`` is called per meme with ``ok|rebuilt|failed``.
    """
    from mewdex.db.models import Meme
    from mewdex.library.scopes import storage_namespace

    report = ReconcileReport()
    with sessions.begin() as session:
        namespace = storage_namespace(session, scope_id)
        ids = session.execute(select(Meme.id).where(Meme.scope_id == scope_id).order_by(Meme.id)).scalars().all()
    for meme_id in ids:
        report.checked += 1
        with sessions.begin() as session:
            meme = session.get(Meme, meme_id)
            if meme is None:
                continue
            animated = (meme.extensions.get("image") or {}).get("animated")
            if not force and not needs_rebuild(session, store, namespace, meme, animated):
                if progress:
                    progress(meme_id, "ok")
                continue
            key, sha = meme.storage_key, meme.sha256
        try:
            data = store.read_bytes(namespace, key)
            thumbs, failure = make_thumbnails(data, max_pixels=max_pixels), None
        except ImageError as exc:
            thumbs, failure = [], exc
        except FileNotFoundError:
            thumbs, failure = [], ImageError("image_corrupt", "the original is missing from the blob store")
        with sessions.begin() as session:
            meme = session.get(Meme, meme_id)
            if meme is None or meme.sha256 != sha:
                continue  # changed meanwhile; the next run picks it up
            store_thumbnails(session, store, namespace, meme, thumbs, failure=failure)
        if failure is None:
            report.rebuilt += 1
        else:
            report.failed += 1
        if progress:
            progress(meme_id, "rebuilt" if failure is None else "failed")
    return report
