"""Safe image decoding: the one module every path uses to read image bytes.

Every upload, import, thumbnail and model input goes through :func:`probe` or
:func:`load_frames`. Both sniff the real format from magic bytes (file names
lie), reject oversized images from the header dimensions before any pixel is
decoded, and turn every decoder failure into an :class:`ImageError` with a
stable code.

Formats: PNG, JPEG, GIF, WEBP, AVIF (Pillow's own plugin) and HEIC (``pillow-heif``'s opener,
registered here) through Pillow; MP4 and WebM clips through PyAV (``av``: FFmpeg), and Telegram's
animated stickers (TGS: gzipped Lottie JSON) rendered by ``rlottie-python``. A clip or a TGS is
opened as a :class:`_Clip`, which :func:`_iter_frames` walks like a Pillow animation, so every
path (probe, model frames, thumbnails) samples a clip's frames exactly as a GIF's, under the same
limits: :data:`MAX_FRAMES` (counted from the container's packets or the Lottie header before any
frame is decoded), ``max_pixels`` per frame, ``max_total_pixels`` over all frames and
:data:`DECODE_SECONDS`; the caller bounds the bytes (``MEWDEX_MAX_UPLOAD_BYTES``).

Pillow's own decompression-bomb limit is switched off at import
(``Image.MAX_IMAGE_PIXELS = None``) so that the project's ``max_pixels`` decides;
this is safe only because no other module opens untrusted images directly.
``ImageFile.LOAD_TRUNCATED_IMAGES`` is left ``False`` so truncated files fail.
"""

from __future__ import annotations

import io
import json
import math
import re
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pillow_heif
from PIL import Image, UnidentifiedImageError

from mewdex.dto import media

Image.MAX_IMAGE_PIXELS = None
pillow_heif.register_heif_opener()  # HEIC/HEIF through Image.open (format "HEIF")

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

MAX_TGS_JSON_BYTES = 8 * 1024 * 1024  # a TGS inflates to at most this much Lottie JSON (Telegram's are < 1 MB)

# The formats and their extensions: one list, mewdex.dto.media (the search filter, names, the CHECK constraint)
EXTENSIONS = media.EXTENSIONS
MEDIA_TYPES = {
    "png": "image/png",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "avif": "image/avif",
    "heic": "image/heic",
    "mp4": "video/mp4",
    "webm": "video/webm",
    "tgs": "application/x-tgsticker",
}
#: Formats a browser plays as a clip (a ``<video>`` element), not as an image.
VIDEO_FORMATS = media.CLIP_FORMATS
#: Formats browsers do not show (HEIC: Safari only; TGS: none): pages show their thumbnails instead.
NOT_IN_BROWSERS = frozenset({"heic", "tgs"})
_PIL_FORMATS = {"png": "PNG", "jpeg": "JPEG", "gif": "GIF", "webp": "WEBP", "avif": "AVIF", "heic": "HEIF"}
_FORMAT_NAMES = "PNG, JPEG, GIF, WEBP, AVIF, HEIC, MP4, WebM or TGS"
# ISO base media (ftyp) brands: AVIF still/sequence, HEIF/HEIC; any other ftyp file is a clip (MP4/MOV/3GP)
_AVIF_BRANDS = (b"avif", b"avis")
_HEIC_BRANDS = (b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"hevm", b"hevs")
_HEIF_GENERIC_BRANDS = (b"mif1", b"msf1", b"miaf")

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


def page_element(extension: str) -> Literal["video", "image", "thumbnail"]:
    """How a page shows a meme stored with ``extension`` (``.mp4``): ``"video"`` (a ``<video>`` of the
    original), ``"image"`` (an ``<img>`` of the original) or ``"thumbnail"`` (an ``<img>`` of its
    thumbnail: a format browsers cannot show)."""
    fmt = next((f for f, ext in EXTENSIONS.items() if ext == extension), None)
    if fmt in VIDEO_FORMATS:
        return "video"
    return "thumbnail" if fmt in NOT_IN_BROWSERS else "image"


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

    ``format`` is the sniffed format key (a key of :data:`EXTENSIONS`); ``extension``
    and ``media_type`` follow from it. ``width``/``height`` are pixels after EXIF
    orientation (a clip's: after its display rotation). ``frames`` >= 1; ``duration_ms`` is the summed frame delay of an
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
        head: the first bytes of the file (12 are enough for most; 64 let an AVIF or HEIC whose
            major brand is a generic HEIF one be told apart by its compatible brands).
    Returns:
        a key of :data:`EXTENSIONS` (``"png"``, ``"jpeg"``, ``"gif"``, ``"webp"``, ``"avif"``,
        ``"heic"``, ``"mp4"``, ``"webm"``, ``"tgs"``), or ``None`` for anything else. Any EBML
        (Matroska) file counts as WebM, any gzip stream as TGS: decoding refuses the rest.
    """
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "gif"
    if len(head) >= 12 and head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "webp"
    if len(head) >= 12 and head[4:8] == b"ftyp":
        return _ftyp_format(head)
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "webm"
    if head.startswith(b"\x1f\x8b"):
        return "tgs"
    return None


def _ftyp_format(head: bytes) -> str | None:
    major = head[8:12]
    size = int.from_bytes(head[0:4], "big")
    compatible = [head[at : at + 4] for at in range(16, min(size, len(head)) - 3, 4)]
    brands = [major, *compatible]
    if any(b in _AVIF_BRANDS for b in brands) and major not in _HEIC_BRANDS:
        return "avif"
    if any(b in _HEIC_BRANDS for b in brands) or major in _HEIF_GENERIC_BRANDS:
        return "heic"
    return "mp4"


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
        ImageError: ``unsupported_media_type`` (none of the formats of :data:`EXTENSIONS`),
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
            for frame in _iter_frames(im, max_pixels, max_total_pixels):
                frames += 1
                duration_ms += _frame_duration(frame)
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
                durations.append(_frame_duration(frame))
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
    fmt = sniff_format(bytes(data[:64]))
    if fmt is None:
        raise ImageError("unsupported_media_type", f"not a {_FORMAT_NAMES} file")
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


def _open(data: bytes, fmt: str, max_pixels: int) -> Any:
    """Open (header only) with the sniffed format's decoder and check the size (and, for WEBP, the
    frame count; for JPEG, the number of scans; for a clip or TGS, the frame count from its packets or
    header). Returns a Pillow image, or a :class:`_Clip` that :func:`_iter_frames` walks alike."""
    if fmt in VIDEO_FORMATS:
        return _open_video(data, fmt, max_pixels)
    if fmt == "tgs":
        return _open_tgs(data, max_pixels)
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


def frame_count(im: Any, max_frames: int = MAX_FRAMES) -> int:
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


def _iter_frames(im: Any, max_pixels: int, max_total_pixels: int) -> Iterator[Image.Image]:
    """Seek through frames in order, checking sizes before decoding each one, at most
    :data:`MAX_FRAMES` frames and :data:`DECODE_SECONDS` of decoding.

    GIF frames may enlarge the canvas, so the size is checked after every seek.
    A :class:`_Clip` (video, TGS) yields a new image per frame, decoded in order; its size is its
    stream's, checked before each frame is decoded, and the decoded frame is checked again.
    """
    total = 0
    deadline = time.monotonic() + DECODE_SECONDS
    clip_frames = im.decode() if isinstance(im, _Clip) else None
    for index in range(frame_count(im)):
        if clip_frames is None:
            im.seek(index)
        _check_pixels(im.size, max_pixels)
        total += im.size[0] * im.size[1]
        if total > max_total_pixels:
            raise ImageError("image_too_large", f"animation decodes to more than {max_total_pixels} pixels")
        if clip_frames is not None:
            frame = next(clip_frames, None)
            if frame is None:  # fewer frames decoded than the container announced
                if index == 0:
                    raise ImageError("image_corrupt", "the clip has no frame that can be decoded")
                break
            _check_pixels(frame.size, max_pixels)
        else:
            if (
                im.format == "JPEG"
                and index == 0
                and im.size[0] * im.size[1] > DRAFT_ABOVE_PIXELS
                and _validate_only(im)
            ):
                # Validation decodes at 1/8 scale (DCT scaling): every scan is still read, 64× fewer pixels.
                im.draft("RGB", (max(1, im.size[0] // 8), max(1, im.size[1] // 8)))
            im.load()
            frame = im
        if time.monotonic() > deadline:
            raise ImageError("image_too_large", f"the image takes more than {DECODE_SECONDS:g} s to decode")
        yield frame


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


# ---------------------------------------------------------------- clips and TGS stickers


@dataclass
class _Clip:
    """A video or TGS opened for decoding: the subset of a Pillow animation that :func:`_iter_frames`,
    :func:`frame_count` and the callers read (``format``, ``size``, ``n_frames``, ``info``, ``seek(0)``,
    ``getexif``). ``decode()`` yields the frames in order, each an image whose ``info["duration"]`` is
    its delay in ms. Closed with the ``with`` block."""

    format: str
    size: tuple[int, int]
    n_frames: int
    decode: Callable[[], Iterator[Image.Image]]
    close: Callable[[], None] = lambda: None
    info: dict[str, Any] = field(default_factory=lambda: {"loop": 0})

    def seek(self, index: int) -> None:  # callers rewind before reading the orientation
        if index != 0:
            raise EOFError(index)

    def getexif(self) -> dict[int, Any]:
        return {}

    def __enter__(self) -> _Clip:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _frame_count_error(count: int) -> ImageError:
    return ImageError("image_too_large", f"the clip has {count} or more frames; the limit is {MAX_FRAMES}")


# The one demuxer each clip format is opened with: never FFmpeg's guess, which could pick a demuxer that
# opens other files or URLs (a playlist, a concat list) for bytes that merely start like an MP4.
_DEMUXERS = {"mp4": "mp4", "webm": "webm"}
# FFmpeg pixel formats with an alpha channel (yuva420p, rgba, gbrap, ya8, …)
_ALPHA_PIXEL_FORMAT = re.compile(r"^(yuva|gbrap|ya\d)|rgba|bgra|argb|abgr")
# A frame's display rotation (counter-clockwise degrees, FFmpeg's display matrix) as the turn that shows it upright
_ROTATIONS = {90: Image.Transpose.ROTATE_90, 180: Image.Transpose.ROTATE_180, 270: Image.Transpose.ROTATE_270}


def _open_video(data: bytes, fmt: str, max_pixels: int) -> _Clip:
    """An MP4 or WebM: its first video stream's size and frame count (its packets, counted by demuxing
    without decoding, refused past :data:`MAX_FRAMES`). A VP8/VP9 stream with an alpha channel (a
    Telegram video sticker) is decoded by libvpx, which keeps the alpha (FFmpeg's own decoders drop it).
    Frames are turned upright by their display rotation (a phone's portrait clip), as browsers show them."""
    import av  # FFmpeg's libraries: loaded only when a clip is decoded

    container = av.open(io.BytesIO(data), mode="r", format=_DEMUXERS[fmt])
    try:
        if not container.streams.video:
            raise ImageError("unsupported_media_type", "the file holds no video stream")
        stream = container.streams.video[0]
        width, height = stream.codec_context.width, stream.codec_context.height
        if width <= 0 or height <= 0:
            raise ImageError("image_corrupt", "the clip's video stream has no frame size")
        _check_pixels((width, height), max_pixels)
        packets = 0
        for packet in container.demux(stream):
            if packet.size:
                packets += 1
                if packets > MAX_FRAMES:
                    raise _frame_count_error(packets)
        rate = stream.average_rate or stream.guessed_rate
        frame_ms = round(1000 / float(rate)) if rate and float(rate) > 0 else DEFAULT_FRAME_MS
        alpha = str(stream.metadata.get("alpha_mode", stream.metadata.get("ALPHA_MODE", ""))) == "1"
        codec = stream.codec_context.name
    finally:
        container.close()
    if packets == 0:
        raise ImageError("image_corrupt", "the clip has no video frames")
    opened: list[Any] = []
    rotation = _first_frame_rotation(av, data, fmt)
    if rotation in (90, 270):
        width, height = height, width

    def decode() -> Iterator[Image.Image]:
        clip = av.open(io.BytesIO(data), mode="r", format=_DEMUXERS[fmt])
        opened.append(clip)
        video = clip.streams.video[0]
        decoder = None
        if alpha and codec in ("vp8", "vp9"):
            decoder = av.CodecContext.create("libvpx-vp9" if codec == "vp9" else "libvpx", "r")
            decoder.extradata = video.codec_context.extradata
        if decoder is None:
            frames: Iterator[Any] = clip.decode(video)
        else:
            frames = (f for packet in clip.demux(video) for f in decoder.decode(packet if packet.size else None))
        for frame in frames:
            if alpha or _ALPHA_PIXEL_FORMAT.search(frame.format.name):
                image = Image.fromarray(frame.to_ndarray(format="rgba"), "RGBA")
            else:
                image = frame.to_image()
            if rotation in _ROTATIONS:
                image = image.transpose(_ROTATIONS[rotation])
            image.info = {"duration": frame_ms}
            yield image

    def close() -> None:
        for clip in opened:
            clip.close()

    return _Clip(format=fmt.upper(), size=(width, height), n_frames=packets, decode=decode, close=close)


def _first_frame_rotation(av: Any, data: bytes, fmt: str) -> int:
    """The display rotation of a clip's first frame, in counter-clockwise degrees 0, 90, 180 or 270."""
    with av.open(io.BytesIO(data), mode="r", format=_DEMUXERS[fmt]) as clip:
        first = next(clip.decode(clip.streams.video[0]), None)
    return round(float(getattr(first, "rotation", 0) or 0) / 90) % 4 * 90 if first is not None else 0


def _open_tgs(data: bytes, max_pixels: int) -> _Clip:
    """A Telegram animated sticker: gzipped Lottie JSON (inflated to at most :data:`MAX_TGS_JSON_BYTES`),
    its size and frame count from the Lottie header, rendered frame by frame by rlottie."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        raw = inflater.decompress(data, MAX_TGS_JSON_BYTES + 1)
    except zlib.error as exc:
        raise ImageError("image_corrupt", f"the sticker cannot be unpacked: {exc}") from exc
    if len(raw) > MAX_TGS_JSON_BYTES:
        raise ImageError("image_too_large", f"the sticker unpacks to more than {MAX_TGS_JSON_BYTES} bytes")
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise ImageError("unsupported_media_type", "a gzip file that is no Lottie animation (TGS)") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("layers"), list):
        raise ImageError("unsupported_media_type", "a gzip file that is no Lottie animation (TGS)")
    try:
        width, height = int(doc["w"]), int(doc["h"])
        rate = float(doc["fr"])
        first, last = float(doc["ip"]), float(doc["op"])
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise ImageError("image_corrupt", "the sticker's header has no size, frame rate or frame range") from exc
    if width <= 0 or height <= 0 or not (rate > 0) or not (last > first) or not math.isfinite(last - first):
        raise ImageError("image_corrupt", "the sticker's header has no size, frame rate or frame range")
    _check_pixels((width, height), max_pixels)
    count = math.ceil(last - first)
    if count > MAX_FRAMES:
        raise _frame_count_error(count)
    frame_ms = max(1, round(1000 / rate))

    def decode() -> Iterator[Image.Image]:
        from rlottie_python import LottieAnimation  # the rlottie library: loaded only for a TGS

        animation = LottieAnimation.from_data(raw.decode("utf-8"))
        try:
            total = min(count, int(animation.lottie_animation_get_totalframe()))
            for index in range(total):
                image = animation.render_pillow_frame(frame_num=index, width=width, height=height)
                image.info = {"duration": frame_ms}
                yield image
        finally:
            animation.lottie_animation_destroy()

    return _Clip(format="TGS", size=(width, height), n_frames=count, decode=decode)
