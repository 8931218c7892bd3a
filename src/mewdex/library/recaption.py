"""Re-captioning an image offline (改字, issue 44): remove the text in some boxes and draw new text in
their place, on every frame of an animation. Pixels in, pixels out: no database, no model. Which
boxes hold the caption (the OCR boxes of ``memes.meme_context.ocr_lines``) and where the result goes
(a new meme through the upload path) are the service's, :mod:`mewdex.pipeline.recaption`.

How (per text block — OCR lines that sit on top of each other form one block):

* **Style** (:func:`detect_style`), from the original pixels in the block: the background is the
  median of a ring just outside the boxes; the pixels far from it are text. When they split into a
  bright and a dark class of which one lies along the other's edges, the text is *outlined* (the
  class on the text's outer rim is the outline, the other the fill: classic white-on-black meme
  text; a rim colour between the fill and the background is anti-aliasing, not an outline); otherwise the
  fill is the median of the pixels furthest from the background. An explicit colour, outline or size
  in :class:`CaptionStyle` wins.
* **Erase** (:func:`erase`): the text pixels (dilated over their anti-aliased edge) are filled with
  the ring's colour where the ring is flat (a caption band, a plain background), else inpainted
  with OpenCV (Telea) from their surroundings; where text covers most of a box the whole box is
  inpainted. Each frame of an animation gets its own mask inside the padded box, so text that moves
  a little is still removed.
* **Draw** (:func:`draw_text`): :func:`caption_font` (Noto Sans CJK SC Bold), centred on the block,
  wrapped per CJK character or Latin word to the image's width, auto-fitted down from the old text's
  line height until it fits (at most 60 % taller than the old block), outlined when the old text was.

Limits: :data:`MAX_TEXT_CHARS` characters of caption, :data:`MAX_BOXES` boxes, animations of at most
:data:`MAX_FRAMES` frames and :data:`MAX_TOTAL_PIXELS` decoded pixels (the decoder's own limits of
:mod:`mewdex.library.images` apply as well).
"""

from __future__ import annotations

import io
import re
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from mewdex.config import get_settings
from mewdex.dto.errors import DomainError
from mewdex.library.images import ImageError, load_all_frames

MAX_TEXT_CHARS = 200
MAX_BOXES = 20
MAX_FRAMES = 300
MAX_TOTAL_PIXELS = 120_000_000
MIN_FONT_PX = 10

#: Where the CJK font is looked for when ``MEWDEX_CAPTION_FONT`` is unset: Debian's ``fonts-noto-cjk``
#: (``make install`` installs it), as (path, face index of Noto Sans CJK SC in the collection).
FONT_CANDIDATES: tuple[tuple[str, int], ...] = (
    ("/usr/share/fonts/opentype/noto/NotoSansCJK-Bold.ttc", 2),
    ("/usr/share/fonts/opentype/noto/NotoSansCJK-Black.ttc", 2),
    ("/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc", 2),
)

Box = tuple[int, int, int, int]
RGB = tuple[int, int, int]


class RecaptionError(DomainError):
    """A re-caption refused: ``caption_empty``, ``caption_too_long``, ``no_text_boxes``, ``boxes_invalid``,
    ``style_invalid``, ``recaption_too_large`` (an animation past the limits), ``caption_font_missing``
    (no CJK font installed), or an image code (``image_corrupt``, ``image_too_large``...)."""


@dataclass(frozen=True)
class TextBox:
    """One text region: pixel corners ``x0, y0`` (inclusive) – ``x1, y1`` (exclusive) of the upright
    image, and the animation frame it was read on (where its style is sampled)."""

    x0: int
    y0: int
    x1: int
    y1: int
    frame: int = 0

    @property
    def height(self) -> int:
        return self.y1 - self.y0

    @property
    def width(self) -> int:
        return self.x1 - self.x0


@dataclass(frozen=True)
class CaptionStyle:
    """How the new text looks; ``None`` = as the old text (detected). ``color``/``outline``: ``#rrggbb``;
    ``outline="none"`` draws none. ``font_size``: pixels (no auto-fit)."""

    color: str | None = None
    outline: str | None = None
    font_size: int | None = None
    #: False: draw over the picture without erasing anything first (a caption placed on a text-free
    #: template, :func:`band`), white with a black outline unless ``color``/``outline`` say otherwise.
    erase: bool = True


#: Where :func:`band` puts a caption on a picture that has none (the classic meme's top or bottom text).
PLACES = ("top", "bottom")


def band(place: str, size: tuple[int, int]) -> TextBox:
    """The caption box ``place`` (``top``/``bottom``: a band of a fifth of the height, inset from the
    edges) of an upright image of ``size`` (width, height); ``boxes_invalid`` for another place."""
    if place not in PLACES:
        raise RecaptionError("boxes_invalid", f"place is one of {', '.join(PLACES)}")
    width, height = size
    x0, x1 = round(width * 0.04), round(width * 0.96)
    if place == "top":
        return TextBox(x0, round(height * 0.02), x1, round(height * 0.2))
    return TextBox(x0, round(height * 0.8), x1, round(height * 0.98))


@dataclass(frozen=True)
class DetectedStyle:
    """What :func:`detect_style` read off a block: fill, outline (None: plain text), background."""

    fill: RGB
    outline: RGB | None
    background: RGB
    flat: bool


@dataclass
class Rendered:
    """The result: encoded bytes, their extension (``.png``/``.jpg``/``.gif``), frames, seconds spent,
    and the style drawn per block."""

    data: bytes
    extension: str
    frames: int
    seconds: float
    styles: list[DetectedStyle] = field(default_factory=list)


# ---------------------------------------------------------------- input checks


def clean_text(text: str | None) -> str:
    """The caption as drawn: NFC, line breaks kept, other control characters dropped, each line's
    spaces collapsed. Raises ``caption_empty`` / ``caption_too_long`` (over :data:`MAX_TEXT_CHARS`)."""
    value = unicodedata.normalize("NFC", text or "").replace("\r\n", "\n").replace("\r", "\n")
    value = "".join(ch for ch in value if ch == "\n" or unicodedata.category(ch)[0] != "C")
    lines = [re.sub(r"\s+", " ", line).strip() for line in value.split("\n")]
    value = "\n".join(line for line in lines if line)
    if not value:
        raise RecaptionError("caption_empty", "give the new caption text")
    if len(value) > MAX_TEXT_CHARS:
        raise RecaptionError("caption_too_long", f"the caption has {len(value)} characters; at most {MAX_TEXT_CHARS}")
    return value


def parse_color(value: str | None, name: str) -> RGB | None:
    """``#rrggbb`` / ``#rgb`` → RGB; None → None. Raises ``style_invalid``."""
    if value is None:
        return None
    match = re.fullmatch(r"#?([0-9a-fA-F]{6}|[0-9a-fA-F]{3})", value.strip())
    if match is None:
        raise RecaptionError("style_invalid", f"{name} must be a colour like #ffffff")
    digits = match.group(1)
    if len(digits) == 3:
        digits = "".join(d * 2 for d in digits)
    return (int(digits[0:2], 16), int(digits[2:4], 16), int(digits[4:6], 16))


def check_boxes(boxes: Sequence[TextBox], size: tuple[int, int]) -> list[TextBox]:
    """The boxes clipped to the image; ``boxes_invalid`` when one is empty or outside, or more than
    :data:`MAX_BOXES`; ``no_text_boxes`` when there are none."""
    if not boxes:
        raise RecaptionError("no_text_boxes", "the meme has no text to replace: give the boxes to write in")
    if len(boxes) > MAX_BOXES:
        raise RecaptionError("boxes_invalid", f"at most {MAX_BOXES} boxes")
    width, height = size
    out = []
    for box in boxes:
        x0, y0 = max(0, min(box.x0, box.x1)), max(0, min(box.y0, box.y1))
        x1, y1 = min(width, max(box.x0, box.x1)), min(height, max(box.y0, box.y1))
        if x1 - x0 < 2 or y1 - y0 < 2:
            raise RecaptionError(
                "boxes_invalid",
                f"box {box.x0},{box.y0},{box.x1},{box.y1} is empty or outside the {width}×{height} image",
            )
        out.append(TextBox(x0, y0, x1, y1, box.frame))
    return out


def boxes_from_ocr(lines: Sequence[dict]) -> list[TextBox]:
    """Axis-aligned boxes of OCR lines (``{"box": [[x, y] × 4], "frame": n}``); lines without a box are
    skipped."""
    out = []
    for line in lines:
        points = line.get("box") if isinstance(line, dict) else None
        if not points:
            continue
        xs = [int(p[0]) for p in points]
        ys = [int(p[1]) for p in points]
        out.append(TextBox(min(xs), min(ys), max(xs) + 1, max(ys) + 1, int(line.get("frame") or 0)))
    return out


# ---------------------------------------------------------------- the font


def caption_font_file() -> tuple[str, int]:
    """The one font lookup: ``MEWDEX_CAPTION_FONT`` (a TrueType/OpenType file or collection; face 0,
    or ``path#index``) when set, else the first of :data:`FONT_CANDIDATES` that exists. Raises
    ``caption_font_missing`` (install Debian's ``fonts-noto-cjk``: ``make install`` does)."""
    configured = get_settings().caption_font
    if configured:
        file, _, face = configured.partition("#")
        if not Path(file).is_file() or not (face or "0").isdigit():
            raise RecaptionError("caption_font_missing", f"MEWDEX_CAPTION_FONT names no font file: {configured}")
        return file, int(face or 0)
    for path, index in FONT_CANDIDATES:
        if Path(path).is_file():
            return path, index
    raise RecaptionError(
        "caption_font_missing",
        "no CJK font for captions: install Debian's fonts-noto-cjk (make install does) or set MEWDEX_CAPTION_FONT",
    )


@lru_cache(maxsize=64)
def _font(path: str, index: int, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(path, size, index=index)


def caption_font(size: int) -> ImageFont.FreeTypeFont:
    """The caption font at ``size`` pixels (:func:`caption_font_file`)."""
    path, index = caption_font_file()
    try:
        return _font(path, index, max(1, int(size)))
    except OSError as exc:
        raise RecaptionError("caption_font_missing", f"the caption font cannot be read: {exc}") from None


# ---------------------------------------------------------------- blocks, style


def text_blocks(boxes: Sequence[TextBox]) -> list[list[TextBox]]:
    """Boxes grouped into blocks of stacked lines (a gap under 0.8 line heights and overlapping
    columns), blocks in reading order (top to bottom)."""
    blocks: list[list[TextBox]] = []
    for box in sorted(boxes, key=lambda b: (b.y0, b.x0)):
        for block in blocks:
            last = block[-1]
            gap = box.y0 - last.y1
            overlap = min(box.x1, last.x1) - max(box.x0, last.x0)
            if gap < 0.8 * min(box.height, last.height) and overlap > -0.5 * min(box.height, last.height):
                block.append(box)
                break
        else:
            blocks.append([box])
    return blocks


def _union(block: Sequence[TextBox]) -> Box:
    return (min(b.x0 for b in block), min(b.y0 for b in block), max(b.x1 for b in block), max(b.y1 for b in block))


def _pad(box: Box, pad: int, size: tuple[int, int]) -> Box:
    x0, y0, x1, y1 = box
    return (max(0, x0 - pad), max(0, y0 - pad), min(size[0], x1 + pad), min(size[1], y1 + pad))


def _line_height(block: Sequence[TextBox]) -> int:
    """The block's text size: its boxes' median height, or width for a column of vertical text."""
    return max(4, int(np.median([min(b.height, b.width) if b.height > 1.5 * b.width else b.height for b in block])))


def _ring(arr: np.ndarray, inner: Box, pad: int) -> np.ndarray:
    """Pixels (N×3) of the band ``pad`` wide just outside ``inner`` (clipped to the image)."""
    h, w = arr.shape[:2]
    ox0, oy0, ox1, oy1 = _pad(inner, pad, (w, h))
    x0, y0, x1, y1 = inner
    parts = [arr[oy0:y0, ox0:ox1], arr[y1:oy1, ox0:ox1], arr[y0:y1, ox0:x0], arr[y0:y1, x1:ox1]]
    pixels = [p.reshape(-1, 3) for p in parts if p.size]
    if not pixels:
        return arr[y0:y1, x0:x1].reshape(-1, 3)
    return np.concatenate(pixels)


def _flat(ring: np.ndarray, background: np.ndarray) -> bool:
    """A plain background: four in five of the ring's pixels within 24 of its median colour."""
    near = np.abs(ring.astype(np.int16) - background.astype(np.int16)).max(axis=1) <= 24
    return bool(near.mean() >= 0.8)


def _text_mask(region: np.ndarray, background: np.ndarray, threshold: float = 60.0) -> np.ndarray:
    diff = np.abs(region.astype(np.int16) - background.astype(np.int16)).max(axis=2)
    return diff > threshold


def _luma(pixels: np.ndarray) -> np.ndarray:
    return pixels[..., 0] * 0.299 + pixels[..., 1] * 0.587 + pixels[..., 2] * 0.114


def detect_style(arr: np.ndarray, block: Sequence[TextBox]) -> DetectedStyle:
    """The block's fill, outline and background, read from the RGB array of the frame its first box
    was read on (see the module's docstring)."""
    union = _union(block)
    line = _line_height(block)
    pad = max(3, line // 5)
    ring = _ring(arr, union, pad)
    background = np.median(ring, axis=0)
    flat = _flat(ring, background)
    x0, y0, x1, y1 = union
    region = arr[y0:y1, x0:x1]
    mask = _text_mask(region, background)
    bg = tuple(int(v) for v in background)
    default = (0, 0, 0) if _luma(background) >= 128 else (255, 255, 255)
    if mask.sum() < 0.02 * mask.size:
        return DetectedStyle(default, None, bg, flat)  # type: ignore[arg-type]
    luma = _luma(region.astype(np.float32))
    values = luma[mask]
    threshold, _ = cv2.threshold(values.astype(np.uint8).reshape(-1, 1), 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
    bright = mask & (luma > threshold)
    dark = mask & (luma <= threshold)
    n_bright, n_dark, n = int(bright.sum()), int(dark.sum()), int(mask.sum())
    if n_bright >= 0.12 * n and n_dark >= 0.12 * n and luma[bright].mean() - luma[dark].mean() > 110:
        radius = max(2, line // 14)
        kernel = np.ones((2 * radius + 1, 2 * radius + 1), np.uint8)
        near_bright = cv2.dilate(bright.astype(np.uint8), kernel) > 0
        near_dark = cv2.dilate(dark.astype(np.uint8), kernel) > 0
        dark_on_edge = (dark & near_bright).sum() / n_dark
        bright_on_edge = (bright & near_dark).sum() / n_bright
        if max(dark_on_edge, bright_on_edge) > 0.75:
            # the outline is what the text shows the background: the class on the text's outer rim
            rim = mask & (cv2.dilate((~mask).astype(np.uint8), np.ones((3, 3), np.uint8)) > 0)
            fill_is_bright = (rim & dark).sum() >= (rim & bright).sum()
            fill_mask, edge_mask = (bright, dark) if fill_is_bright else (dark, bright)
            fill = tuple(int(v) for v in np.median(region[fill_mask], axis=0))
            edge = tuple(int(v) for v in np.median(region[edge_mask], axis=0))
            if not _antialiasing(np.array(fill, float), np.array(edge, float), background.astype(float)):
                return DetectedStyle(fill, edge, bg, flat)  # type: ignore[arg-type]
    distance = np.abs(region[mask].astype(np.int16) - background.astype(np.int16)).max(axis=1)
    strongest = region[mask][distance >= np.median(distance)]
    fill = tuple(int(v) for v in np.median(strongest, axis=0))
    return DetectedStyle(fill, None, bg, flat)  # type: ignore[arg-type]


def _antialiasing(fill: np.ndarray, edge: np.ndarray, background: np.ndarray) -> bool:
    """Whether an edge colour lies between the fill and the background (the glyphs' anti-aliased rim,
    not an outline): on the segment fill→background, away from both ends, within 40 of it."""
    axis = background - fill
    length = float(axis @ axis)
    if length < 1:
        return False
    t = float((edge - fill) @ axis) / length
    residual = float(np.linalg.norm(edge - fill - t * axis))
    return 0.15 < t < 0.9 and residual < 40


def presence(arr: np.ndarray, block: Sequence[TextBox], fill: RGB) -> int:
    """Pixels of the block's boxes within 40 of the text's fill colour: how much of the text a frame
    shows (an animation's caption may come and go)."""
    x0, y0, x1, y1 = _union(block)
    region = arr[y0:y1, x0:x1].astype(np.int16)
    return int((np.abs(region - np.array(fill, np.int16)).max(axis=2) < 40).sum())


# ---------------------------------------------------------------- erase, draw


def erase(arr: np.ndarray, block: Sequence[TextBox]) -> None:
    """Remove the text of ``block`` from the RGB array ``arr`` in place (flat fill or inpainting)."""
    h, w = arr.shape[:2]
    line = _line_height(block)
    pad = max(3, line // 5)
    grow = max(2, line // 10)
    ring = _ring(arr, _union(block), pad)
    background = np.median(ring, axis=0)
    flat = _flat(ring, background)
    for box in block:
        inner = _pad((box.x0, box.y0, box.x1, box.y1), grow, (w, h))
        x0, y0, x1, y1 = inner
        region = arr[y0:y1, x0:x1]
        radius = max(2, line // 12)
        mask = cv2.dilate(
            _text_mask(region, background, threshold=40.0).astype(np.uint8),
            np.ones((2 * radius + 1, 2 * radius + 1), np.uint8),
        )
        if flat:
            region[mask > 0] = background.astype(np.uint8)
            continue
        if mask.mean() > 0.55:
            mask[:] = 1
        # inpaint a crop around the box: the cost follows the crop, not the image
        cx0, cy0, cx1, cy1 = _pad(inner, 2 * pad, (w, h))
        crop = np.ascontiguousarray(arr[cy0:cy1, cx0:cx1])
        crop_mask = np.zeros(crop.shape[:2], np.uint8)
        crop_mask[y0 - cy0 : y1 - cy0, x0 - cx0 : x1 - cx0] = mask
        arr[cy0:cy1, cx0:cx1] = _inpaint(crop, crop_mask, line)


#: Text lines taller than this are inpainted at a smaller scale (Telea's cost grows with the masked area).
INPAINT_LINE_PX = 32


def _inpaint(crop: np.ndarray, mask: np.ndarray, line: int) -> np.ndarray:
    """Telea inpainting of ``mask`` in ``crop``; big text at a scale where its line is
    :data:`INPAINT_LINE_PX` high, the result scaled back and pasted under the mask only."""
    scale = min(1.0, INPAINT_LINE_PX / max(1, line))
    if scale >= 0.75:
        return cv2.inpaint(crop, mask, 3, cv2.INPAINT_TELEA)
    size = (max(1, round(crop.shape[1] * scale)), max(1, round(crop.shape[0] * scale)))
    small = cv2.resize(crop, size, interpolation=cv2.INTER_AREA)
    small_mask = cv2.dilate(cv2.resize(mask, size, interpolation=cv2.INTER_NEAREST), np.ones((3, 3), np.uint8))
    filled = cv2.resize(cv2.inpaint(small, small_mask, 3, cv2.INPAINT_TELEA), (crop.shape[1], crop.shape[0]))
    out = crop.copy()
    out[mask > 0] = filled[mask > 0]
    return out


def _tokens(paragraph: str) -> list[str]:
    """Breakable pieces: Latin words (with their trailing space), each CJK character, punctuation
    staying with what precedes it."""
    pieces = re.findall(r"[A-Za-z0-9'’\-.,!?:;\"]+ ?| |[^\sA-Za-z0-9]", paragraph)
    out: list[str] = []
    for piece in pieces:
        if out and unicodedata.category(piece[0]).startswith("P"):
            out[-1] += piece
        else:
            out.append(piece)
    return out


def wrap(text: str, font: ImageFont.FreeTypeFont, width: float) -> list[str]:
    """Lines of ``text`` no wider than ``width`` pixels (a single piece wider than that stays whole)."""
    lines: list[str] = []
    for paragraph in text.split("\n"):
        current = ""
        for token in _tokens(paragraph):
            candidate = current + token
            if current and font.getlength(candidate.rstrip()) > width:
                lines.append(current.rstrip())
                current = token.lstrip()
            else:
                current = candidate
        if current.strip():
            lines.append(current.rstrip())
    return lines or [text]


def _layout(text: str, block: Sequence[TextBox], size: tuple[int, int], style: CaptionStyle):
    """(font, lines, line spacing px, centre) of the text for ``block``: auto-fitted unless ``font_size``."""
    width, height = size
    x0, y0, x1, y1 = _union(block)
    line = _line_height(block)
    vertical = (y1 - y0) > 1.5 * (x1 - x0)  # a column: written across, about its height's space
    avail_w = width * 0.92
    avail_h = min(height * 0.9, (y1 - y0) if vertical else max(y1 - y0, line) * 1.6)
    # text smaller than this is not read back well (the OCR sees the image at most 480 px wide)
    smallest = max(MIN_FONT_PX, round(max(width, height) * 0.03))
    if style.font_size is not None:
        sizes = [style.font_size]
    else:
        start = max(smallest, min(400, round(0.85 * line)))
        sizes = []
        s = float(start)
        while s > smallest:
            sizes.append(int(s))
            s *= 0.92
        sizes.append(smallest)
    for px in sizes:
        font = caption_font(px)
        lines = wrap(text, font, avail_w)
        spacing = round(px * 1.18)
        widest = max(font.getlength(line) for line in lines)
        if len(lines) * spacing <= avail_h and widest <= avail_w:
            break
    cx = min(max((x0 + x1) / 2, widest / 2 + 2), width - widest / 2 - 2)
    total = len(lines) * spacing
    cy = min(max((y0 + y1) / 2, total / 2 + 2), height - total / 2 - 2)
    return font, lines, spacing, (cx, cy)


def _contrasts(fill: RGB, image: Image.Image, layout) -> bool:
    """Whether plain text of ``fill`` stands out from what it is drawn on (the erased background
    under the laid-out text, median luma at least 90 apart); when not, it gets an outline."""
    font, lines, spacing, (cx, cy) = layout
    half_w = max(font.getlength(line) for line in lines) / 2
    half_h = len(lines) * spacing / 2
    box = (int(max(0, cx - half_w)), int(max(0, cy - half_h)), int(cx + half_w) + 1, int(cy + half_h) + 1)
    under = np.asarray(image.crop(box), float).reshape(-1, 3)
    if not under.size:
        return True
    return abs(float(_luma(np.median(under, axis=0))) - float(_luma(np.array(fill, float)))) >= 90


def draw_text(image: Image.Image, layout, fill: RGB, outline: RGB | None) -> None:
    """Draw laid-out text (:func:`_layout`) centred, outlined when ``outline`` is given."""
    font, lines, spacing, (cx, cy) = layout
    draw = ImageDraw.Draw(image)
    stroke = max(1, round(font.size * 0.08)) if outline is not None else 0
    top = cy - len(lines) * spacing / 2
    for index, line in enumerate(lines):
        draw.text(
            (cx, top + (index + 0.5) * spacing),
            line,
            font=font,
            fill=fill,
            anchor="mm",
            stroke_width=stroke,
            stroke_fill=outline,
        )


def assign_text(text: str, blocks: Sequence[Sequence[TextBox]]) -> list[str | None]:
    """The text of each block: one line per block when the caption has as many lines as there are
    blocks, else all of it in the largest block (the others are only erased)."""
    paragraphs = text.split("\n")
    if len(blocks) > 1 and len(paragraphs) == len(blocks):
        return list(paragraphs)
    areas = [(u[2] - u[0]) * (u[3] - u[1]) for u in (_union(b) for b in blocks)]
    biggest = areas.index(max(areas))
    return [text if i == biggest else None for i in range(len(blocks))]


# ---------------------------------------------------------------- the whole image


def render(
    data: bytes,
    text: str | None,
    boxes: Sequence[TextBox],
    style: CaptionStyle | None = None,
    *,
    first_frame_only: bool = False,
    max_pixels: int | None = None,
    place: str | None = None,
) -> Rendered:
    """Re-caption image bytes: every frame (or only the first, for a preview) with ``boxes`` erased and
    ``text`` drawn (``text=None``: erase only — a template). ``place`` (``top``/``bottom``): write in
    that :func:`band` instead of ``boxes``, over the picture, erasing nothing (a text-free template).
    Returns :class:`Rendered` (PNG for a still PNG/WEBP, JPEG for a JPEG, GIF for an animation). Raises
    :class:`RecaptionError` (:func:`clean_text`'s codes, ``boxes_invalid``, ``no_text_boxes``,
    ``style_invalid``, ``recaption_too_large``, ``caption_font_missing``) or an image code
    (``image_corrupt``...)."""
    started = time.perf_counter()
    style = style or CaptionStyle()
    if place is not None:
        band(place, (1, 1))  # an unknown place fails before any decoding
        style = replace(style, erase=False)
    caption = clean_text(text) if text is not None else None
    fill_override = parse_color(style.color, "color")
    outline_off = (style.outline or "").strip().lower() == "none"
    outline_override = None if outline_off else parse_color(style.outline, "outline")
    if not style.erase:  # nothing to match on a text-free picture: classic meme text
        fill_override = fill_override or (255, 255, 255)
        outline_override = None if outline_off else (outline_override or (0, 0, 0))
    if style.font_size is not None and not (MIN_FONT_PX <= style.font_size <= 400):
        raise RecaptionError("style_invalid", f"font_size must be {MIN_FONT_PX} to 400 pixels")
    if caption is not None:
        caption_font_file()  # a missing font fails before any decoding
    limit = max_pixels or get_settings().max_pixels
    try:
        animation = load_all_frames(data, max_pixels=limit, max_total_pixels=MAX_TOTAL_PIXELS, max_frames=MAX_FRAMES)
    except ImageError as exc:
        if exc.code == "image_too_large" and ("frames" in exc.message or "animation" in exc.message):
            raise RecaptionError(
                "recaption_too_large",
                f"animations of at most {MAX_FRAMES} frames and {MAX_TOTAL_PIXELS // 1_000_000} million "
                f"decoded pixels can be re-captioned: {exc.message}",
            ) from None
        raise RecaptionError(exc.code, exc.message) from None
    frames = animation.frames[:1] if first_frame_only else animation.frames
    size = frames[0].size
    checked = check_boxes([band(place, size)] if place is not None else boxes, size)
    blocks = text_blocks(checked)
    arrays = [np.array(frame) for frame in frames]
    styles = []
    for block in blocks:
        source = arrays[min(block[0].frame, len(arrays) - 1)]
        styles.append(detect_style(source, block))
    texts = assign_text(caption, blocks) if caption is not None else [None] * len(blocks)
    layouts = [
        _layout(t, block, size, style) if t is not None else None for t, block in zip(texts, blocks, strict=True)
    ]
    # where an animation's frame shows little of a block's text (it comes and goes), that block is
    # left as it is on that frame (the new text is drawn on every frame)
    shown = [
        presence(arrays[min(b[0].frame, len(arrays) - 1)], b, st.fill) for b, st in zip(blocks, styles, strict=True)
    ]
    out_frames = []
    for arr in arrays:
        for block, detected, reference in zip(blocks, styles, shown, strict=True):
            if style.erase and (len(arrays) == 1 or presence(arr, block, detected.fill) >= 0.35 * reference):
                erase(arr, block)
        image = Image.fromarray(arr)
        for layout, detected in zip(layouts, styles, strict=True):
            if layout is None:
                continue
            fill = fill_override or detected.fill
            outline = detected.outline if outline_override is None else outline_override
            if outline is None and not outline_off and not _contrasts(fill, image, layout):
                outline = (0, 0, 0) if _luma(np.array(fill, float)) >= 128 else (255, 255, 255)
            draw_text(image, layout, fill, None if outline_off else outline)
        out_frames.append(image)
    encoded, extension = _encode(out_frames, animation.durations, animation.loop, animation.format)
    return Rendered(encoded, extension, len(out_frames), time.perf_counter() - started, styles)


def encode_gif(frames: Sequence[Image.Image], durations: Sequence[int], loop: int | None = 0) -> bytes:
    """The one GIF writer (a re-captioned animation, a clip sent where a platform needs a GIF):
    ``frames`` (RGB, one size), ``durations`` in ms per frame, ``loop`` (0 = forever, None: none
    written). Returns the GIF's bytes."""
    buffer = io.BytesIO()
    extra = {"loop": loop} if loop is not None else {}
    frames[0].save(
        buffer,
        "GIF",
        save_all=True,
        append_images=list(frames[1:]),
        duration=list(durations[: len(frames)]),
        optimize=False,
        disposal=1,
        **extra,
    )
    return buffer.getvalue()


def _encode(frames: list[Image.Image], durations: list[int], loop: int | None, fmt: str) -> tuple[bytes, str]:
    buffer = io.BytesIO()
    if len(frames) > 1:
        return encode_gif(frames, durations, loop), ".gif"
    if fmt == "jpeg":
        frames[0].save(buffer, "JPEG", quality=92)
        return buffer.getvalue(), ".jpg"
    frames[0].save(buffer, "PNG", optimize=False)
    return buffer.getvalue(), ".png"
