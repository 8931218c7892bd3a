"""Safe image decoding: the one module every path uses to read image bytes.

Every upload, import, thumbnail and model input goes through :func:`probe` or
:func:`load_frames`. Both sniff the real format from magic bytes (file names
lie), reject oversized images from the header dimensions before any pixel is
decoded, and turn every decoder failure into an :class:`ImageError` with a
stable code.

Pillow's own decompression-bomb limit is switched off at import
(``Image.MAX_IMAGE_PIXELS = None``) so that the project's ``max_pixels`` decides;
this is safe only because no other module opens untrusted images directly.
``ImageFile.LOAD_TRUNCATED_IMAGES`` is left ``False`` so truncated files fail.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import numpy as np
from PIL import Image, UnidentifiedImageError

Image.MAX_IMAGE_PIXELS = None

DEFAULT_MAX_PIXELS = 24_000_000
DEFAULT_MAX_TOTAL_PIXELS = 1_000_000_000
MAX_FRAMES = 1000  # an animation with more frames is refused before they are decoded
DECODE_SECONDS = 20.0  # wall-clock budget of one probe/load (checked between frames)
# A progressive JPEG's decoder walks the whole coefficient buffer once per scan, inside one C call
# that no deadline interrupts: 20,000 empty 4-byte scans of a 4 MP image (a 320 KB file) took 17 s.
# Encoders write 10–20 scans; more than this many are refused before decoding (500 scans of a
# 24 MP image decode in about 2.5 s).
MAX_JPEG_SCANS = 500
DEFAULT_FRAME_MS = 100

EXTENSIONS = {"png": ".png", "jpeg": ".jpg", "gif": ".gif", "webp": ".webp"}
MEDIA_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp"}
_PIL_FORMATS = {"png": "PNG", "jpeg": "JPEG", "gif": "GIF", "webp": "WEBP"}

_HTTP_STATUS = {"image_corrupt": 422, "unsupported_media_type": 415, "image_too_large": 413}

_ORIENTATION_TAG = 0x0112
_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_WHITE = (255, 255, 255)

FrameSelection = Literal["first", "first_middle", "spread4"]


class ImageError(Exception):
    """A rejected image.

    Attributes:
        code: ``image_corrupt`` | ``unsupported_media_type`` | ``image_too_large``.
        message: human-readable explanation (also ``str(error)``).
        http_status: 422, 415 or 413 respectively.
    """

    def __init__(self, code: str, message: str) -> None:
        if code not in _HTTP_STATUS:
            raise ValueError(f"unknown image error code: {code}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.http_status = _HTTP_STATUS[code]


@dataclass(frozen=True, slots=True)
class ImageInfo:
    """What :func:`probe` learned from a fully decoded image.

    ``format`` is the sniffed format key (``png|jpeg|gif|webp``); ``extension``
    and ``media_type`` follow from it. ``width``/``height`` are pixels after EXIF
    orientation. ``frames`` >= 1; ``duration_ms`` is the summed frame delay of an
    animation (a missing or zero delay counts 100 ms), 0 for a still image.
    """

    format: str
    extension: str
    media_type: str
    width: int
    height: int
    frames: int
    duration_ms: int
    animated: bool


def sniff_format(head: bytes) -> str | None:
    """Return the real format of image bytes from their magic number.

    Args:
        head: the first bytes of the file (12 are enough).
    Returns:
        ``"png"``, ``"jpeg"``, ``"gif"``, ``"webp"``, or ``None`` for anything else.
    """
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "gif"
    if len(head) >= 12 and head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "webp"
    return None


def probe(
    data: bytes,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_total_pixels: int = DEFAULT_MAX_TOTAL_PIXELS,
) -> ImageInfo:
    """Validate image bytes by decoding every frame, and describe them.

    Args:
        data: the complete file.
        max_pixels: largest allowed width*height of the canvas (checked from the
            header, and again for every frame, before decoding).
        max_total_pixels: largest allowed sum of pixels decoded over all frames
            (bounds the work an animation can cause).
    Returns:
        :class:`ImageInfo`.
    Raises:
        ImageError: ``unsupported_media_type`` (not PNG/JPEG/GIF/WEBP),
            ``image_too_large`` (over a pixel limit), ``image_corrupt`` (anything
            the decoder rejects, including truncated files).
    """
    fmt = _require_format(data)
    with _guard():
        with _open(data, fmt, max_pixels) as im:
            width, height = im.size
            # probe keeps no pixels: a large JPEG is checked at 1/8 scale (a marker PIL's stubs do not know)
            im._mewdex_validate_only = True  # type: ignore[attr-defined]
            frames = 0
            duration_ms = 0
            for _frame in _iter_frames(im, max_pixels, max_total_pixels):
                frames += 1
                duration_ms += _frame_duration(im)
            im.seek(0)
            if _orientation(im) >= 5:
                width, height = height, width
    animated = frames > 1
    return ImageInfo(
        format=fmt,
        extension=EXTENSIONS[fmt],
        media_type=MEDIA_TYPES[fmt],
        width=width,
        height=height,
        frames=frames,
        duration_ms=duration_ms if animated else 0,
        animated=animated,
    )


def load_frames(
    data: bytes,
    *,
    indices: FrameSelection = "first",
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_total_pixels: int = DEFAULT_MAX_TOTAL_PIXELS,
) -> list[Image.Image]:
    """Decode selected frames as upright 8-bit RGB images on a white background.

    Args:
        data: the complete file.
        indices: ``"first"`` (one frame), ``"first_middle"`` (first, plus the
            middle frame of an animation), ``"spread4"`` (up to 4 evenly spaced
            frames, first and last included).
        max_pixels, max_total_pixels: as for :func:`probe`.
    Returns:
        ``list[PIL.Image.Image]`` in mode ``RGB``, in frame order, EXIF
        orientation applied, transparency composited onto white, animation
        frames fully composited, carrying no metadata (``info`` is empty).
    Raises:
        ImageError: as for :func:`probe`.
    """
    fmt = _require_format(data)
    with _guard():
        with _open(data, fmt, max_pixels) as im:
            wanted = select_frame_indices(frame_count(im), indices)
            frames = []
            for index, frame in enumerate(_iter_frames(im, max_pixels, max_total_pixels)):
                if index in wanted:
                    frames.append(_to_rgb(frame))
                if index >= max(wanted):
                    break
            im.seek(0)
            method = _TRANSPOSE.get(_orientation(im))
    return [frame.transpose(method) if method else frame for frame in frames]


@dataclass(frozen=True, slots=True)
class Animation:
    """Every frame of an image as :func:`load_all_frames` decoded it: ``frames`` (upright 8-bit
    ``RGB``, transparency on white), ``durations`` (ms per frame, a missing or zero delay counts
    100 ms), ``loop`` (the GIF/WEBP loop count, 0 = forever, ``None`` when the file has none) and
    the sniffed ``format``."""

    frames: list[Image.Image]
    durations: list[int]
    loop: int | None
    format: str


def load_all_frames(
    data: bytes,
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_total_pixels: int = DEFAULT_MAX_TOTAL_PIXELS,
    max_frames: int = MAX_FRAMES,
) -> Animation:
    """Decode every frame (a still image has one), with the limits of :func:`probe` and at most
    ``max_frames`` frames. Raises :class:`ImageError` as :func:`probe` does (``image_too_large``
    past ``max_frames``)."""
    fmt = _require_format(data)
    with _guard():
        with _open(data, fmt, max_pixels) as im:
            frame_count(im, max_frames=min(max_frames, MAX_FRAMES))  # image_too_large past the cap
            frames, durations = [], []
            for frame in _iter_frames(im, max_pixels, max_total_pixels):
                frames.append(_to_rgb(frame))
                durations.append(_frame_duration(im))
            im.seek(0)
            loop = im.info.get("loop")
            method = _TRANSPOSE.get(_orientation(im))
    if method:
        frames = [frame.transpose(method) for frame in frames]
    return Animation(frames, durations, loop if isinstance(loop, int) else None, fmt)


def select_frame_indices(n_frames: int, indices: FrameSelection) -> list[int]:
    """Return the sorted frame numbers a selection names for ``n_frames`` frames.

    Raises:
        ValueError: unknown selection name.
    """
    n_frames = max(n_frames, 1)
    last = n_frames - 1
    if indices == "first":
        return [0]
    if indices == "first_middle":
        return sorted({0, n_frames // 2})
    if indices == "spread4":
        return sorted({round(i * last / 3) for i in range(4)})
    raise ValueError(f"unknown frame selection: {indices}")


def _require_format(data: bytes) -> str:
    fmt = sniff_format(bytes(data[:16]))
    if fmt is None:
        raise ImageError("unsupported_media_type", "not a PNG, JPEG, GIF or WEBP image")
    return fmt


@contextmanager
def _guard() -> Iterator[None]:
    """Map every decoder failure inside the block to :class:`ImageError`."""
    try:
        yield
    except ImageError:
        raise
    except (Image.DecompressionBombError, MemoryError) as exc:
        raise ImageError("image_too_large", "image is too large to decode") from exc
    except UnidentifiedImageError as exc:
        raise ImageError("image_corrupt", "image header cannot be read") from exc
    except Exception as exc:  # Pillow raises OSError, SyntaxError, ValueError, struct.error, ...
        raise ImageError("image_corrupt", f"image cannot be decoded: {exc}") from exc


def _webp_frame_chunks(data: bytes, cap: int) -> int:
    """ANMF (frame) chunks of a WEBP, counted from the RIFF chunk headers up to ``cap + 1`` — before
    libwebp's demuxer indexes every frame (a million-frame file would cost it ~100 MB)."""
    count, at, end = 0, 12, min(len(data), 8 + int.from_bytes(data[4:8], "little"))
    while at + 8 <= end and count <= cap:
        if data[at : at + 4] == b"ANMF":
            count += 1
        size = int.from_bytes(data[at + 4 : at + 8], "little")
        at += 8 + size + (size & 1)
    return count


def _jpeg_scans(data: bytes, cap: int) -> int:
    """SOS markers (scans) of a JPEG, counted by walking its marker segments up to ``cap + 1``: marker
    segments are skipped by their length (an EXIF thumbnail's own markers are not counted), entropy-coded
    data up to the next marker (``FF00`` stuffing and ``RST`` markers belong to it)."""
    count, at, end = 0, 2, len(data)
    while at + 1 < end and count <= cap:
        if data[at] != 0xFF:  # entropy-coded data (or junk): on to the next 0xFF
            at = data.find(b"\xff", at)
            if at < 0:
                break
            continue
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
        elif marker == 0x00 or marker == 0x01 or 0xD0 <= marker <= 0xD7:  # stuffing, TEM, RSTn: no length
            at += 2
        elif marker == 0xD9:  # EOI
            break
        else:
            count += marker == 0xDA
            at += 2 + int.from_bytes(data[at + 2 : at + 4], "big")
    return count


def _open(data: bytes, fmt: str, max_pixels: int) -> Image.Image:
    """Open (header only) with the sniffed format's decoder and check the size (and, for WEBP, the
    frame count; for JPEG, the number of scans)."""
    if fmt == "webp" and _webp_frame_chunks(data, MAX_FRAMES) > MAX_FRAMES:
        raise ImageError("image_too_large", f"the animation has more than {MAX_FRAMES} frames")
    if fmt == "jpeg" and _jpeg_scans(data, MAX_JPEG_SCANS) > MAX_JPEG_SCANS:
        raise ImageError("image_too_large", f"the JPEG has more than {MAX_JPEG_SCANS} scans")
    im = Image.open(io.BytesIO(data), formats=[_PIL_FORMATS[fmt]])
    _check_pixels(im.size, max_pixels)
    return im


def _check_pixels(size: tuple[int, int], max_pixels: int) -> None:
    width, height = size
    if width * height > max_pixels:
        raise ImageError(
            "image_too_large",
            f"image is {width}x{height} = {width * height} pixels; the limit is {max_pixels}",
        )


def frame_count(im: Image.Image, max_frames: int = MAX_FRAMES) -> int:
    """Frames of ``im``, refusing more than ``max_frames`` (``image_too_large``) without walking
    past the cap: GIF's ``n_frames`` would seek through every frame of a million-frame file."""
    if im.format == "GIF":
        count = 0
        try:
            while True:
                im.seek(count)
                count += 1
                if count > max_frames:
                    break
        except EOFError:
            pass
        im.seek(0)
    else:
        count = getattr(im, "n_frames", 1)
    if count > max_frames:
        raise ImageError("image_too_large", f"the animation has more than {max_frames} frames")
    return max(count, 1)


def _iter_frames(im: Image.Image, max_pixels: int, max_total_pixels: int) -> Iterator[Image.Image]:
    """Seek through frames in order, checking sizes before decoding each one, at most
    :data:`MAX_FRAMES` frames and :data:`DECODE_SECONDS` of decoding.

    GIF frames may enlarge the canvas, so the size is checked after every seek.
    """
    total = 0
    deadline = time.monotonic() + DECODE_SECONDS
    for index in range(frame_count(im)):
        im.seek(index)
        _check_pixels(im.size, max_pixels)
        total += im.size[0] * im.size[1]
        if total > max_total_pixels:
            raise ImageError("image_too_large", f"animation decodes to more than {max_total_pixels} pixels")
        if im.format == "JPEG" and index == 0 and im.size[0] * im.size[1] > DRAFT_ABOVE_PIXELS and _validate_only(im):
            # Validation decodes at 1/8 scale (DCT scaling): every scan is still read, 64× fewer pixels.
            im.draft("RGB", (max(1, im.size[0] // 8), max(1, im.size[1] // 8)))
        im.load()
        if time.monotonic() > deadline:
            raise ImageError("image_too_large", f"the image takes more than {DECODE_SECONDS:g} s to decode")
        yield im


DRAFT_ABOVE_PIXELS = 4_000_000


def _validate_only(im: Image.Image) -> bool:
    return bool(getattr(im, "_mewdex_validate_only", False))


def _frame_duration(im: Image.Image) -> int:
    duration = im.info.get("duration")
    if not isinstance(duration, (int, float)) or duration <= 0:
        return DEFAULT_FRAME_MS
    return int(duration)


def _orientation(im: Image.Image) -> int:
    """EXIF orientation 1-8; unreadable or out-of-range values count as 1."""
    try:
        value = im.getexif().get(_ORIENTATION_TAG, 1)
    except Exception:  # malformed EXIF must never fail an image
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _to_rgb(frame: Image.Image) -> Image.Image:
    """Convert the current frame to 8-bit RGB, compositing transparency onto white."""
    if frame.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N"):
        frame = _wide_grey_to_l(frame)
    if frame.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in frame.info:
        rgba = frame.convert("RGBA")
        out = Image.new("RGBA", rgba.size, _WHITE + (255,))
        out.alpha_composite(rgba)
        out = out.convert("RGB")
    else:
        out = frame.convert("RGB")
    out.info = {}
    return out


def _wide_grey_to_l(frame: Image.Image) -> Image.Image:
    """Scale 16-bit greyscale (0..65535) to 8-bit ``L`` (or ``LA`` with tRNS)."""
    raw = np.asarray(frame, dtype=np.int64)
    grey = Image.fromarray((np.clip(raw, 0, 65535) // 257).astype(np.uint8), "L")
    transparent = frame.info.get("transparency")
    if not isinstance(transparent, int):
        return grey
    alpha = Image.fromarray(np.where(raw == transparent, 0, 255).astype(np.uint8), "L")
    grey.putalpha(alpha)
    return grey
