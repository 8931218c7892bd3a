"""The structured **meme context**: what the index knows about one image, and the texts that
the keyword and vector legs of search are built from.

Inputs are restricted to what a user actually has: the image bytes (through OCR lines and,
later, image labels from the visual stage) and the path the file was stored under. Source
metadata (e.g. a corpus ``metadata.jsonl``) must never be passed in.

* :func:`build_meme_context` -> JSON-able dict (stored as JSONB on the image revision).
* :func:`semantic_fields`    (:mod:`mewdex.search.documents`) -> ``{field: text}`` to embed one vector per field;
  search takes the max cosine over an image's fields (measured better than one concatenated document).
* :func:`keyword_document`   (:mod:`mewdex.search.documents`) -> ``{field: space-joined tokens}`` for a weighted
  ``tsvector`` (``simple`` config) plus ``phrase``: folded text for the exact-phrase substring boost.

OCR clean-up rules are per image (no corpus statistics): lines below ``OCR_MIN_SCORE``
(0.6: retrieval is flat for 0.5-0.8 and drops at 0.9, measured in bench/lab_text_recipe.py) are
dropped, and so are watermark-like lines (``@handle``, ``知乎@…``, URLs, platform names such as
bilibili/抖音, video ids, player timestamps, single stray characters) and — when the image size
is given — small text blocks in a corner band (TV-station logos such as 东方卫视/DRAGON TV).
The corner rule gave +0.02 MRR@10 on the dev queries; a corpus statistic (dropping lines seen
on >= 5 images) added nothing on top of it, so none is used.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from mewdex.library import names
from mewdex.search.documents import (  # the search recipe built from a context, re-exported
    CONTEXT_VERSION,
    FIELDS_BY_EMBEDDER,
    keyword_document,
    semantic_fields,
)
from mewdex.search.text import fold, has_han, is_generic_segment, readable_words, split_compound, tokenize

__all__ = [
    "CONTEXT_VERSION",
    "OCR_MIN_SCORE",
    "GENERIC_NAMES",
    "build_meme_context",
    "semantic_fields",
    "FIELDS_BY_EMBEDDER",
    "keyword_document",
    "name_parts",
    "clean_ocr_lines",
    "detect_language",
]

#: OCR lines with a recognition score below this are dropped (measured; see module doc).
OCR_MIN_SCORE = 0.6
#: Labels below this score are dropped.
LABEL_MIN_SCORE = 0.0

#: Folder/file names that say nothing about the image: one list, in mewdex.library.generic_words.
GENERIC_NAMES = names.GENERIC_NAMES

# Watermark / platform noise on video screenshots and reposts (checked per line).
_WATERMARK = re.compile(
    r"(@\S+|https?://|www\.|\.com\b|\.cn\b|\bbv[0-9a-z]{8,}\b|\bav\d{5,}\b|"
    r"bilibili|哔哩|知乎|微博|抖音|快手|小红书|tiktok|weibo|douyin|xiaohongshu|imgflip|"
    r"\d{1,2}:\d{2}(?::\d{2})?\s*/\s*\d{1,2}:\d{2})",
    re.I,
)


def _norm_stem(name: str) -> str:
    name = unicodedata.normalize("NFKC", name or "").strip()
    base = name.rsplit("/", 1)[-1]
    if "." in base[1:]:
        stem, ext = base.rsplit(".", 1)
        if 1 <= len(ext) <= 5 and ext.isalnum():
            base = stem
    return base


def name_parts(relative_path: str, display_name: str | None = None) -> dict[str, Any]:
    """Split a stored path into name evidence.

    Returns ``{"stem": str, "folders": [str], "stem_words": [str], "folder_words": [str]}``:
    folders are the non-generic directory names (nearest last); words are readable, folded,
    de-duplicated, with counters/generic names removed. ``display_name`` (when the user renamed
    the meme) replaces the file stem.
    """
    rel = (relative_path or "").replace("\\", "/").strip("/")
    parts = [p for p in rel.split("/") if p and p not in (".", "..")]
    stem = _norm_stem(display_name) if display_name else (_norm_stem(parts[-1]) if parts else "")
    folders = [p for p in parts[:-1] if not is_generic_segment(p)]
    stem_words = [] if is_generic_segment(stem) else readable_words(stem)
    folder_words: list[str] = []
    for f in folders:
        folder_words.extend(readable_words(f))
    return {
        "stem": stem,
        "folders": folders,
        "stem_words": list(dict.fromkeys(stem_words)),
        "folder_words": list(dict.fromkeys(w for w in folder_words if w not in stem_words)),
    }


def _line_dict(line: Any) -> dict[str, Any]:
    if isinstance(line, dict):
        return {
            "text": str(line.get("text", "")),
            "score": float(line.get("score", 0.0)),
            "box": line.get("box"),
            "frame": line.get("frame") or 0,
        }
    return {
        "text": str(getattr(line, "text", "")),
        "score": float(getattr(line, "score", 0.0)),
        "box": getattr(line, "box", None),
        "frame": getattr(line, "frame", 0) or 0,
    }


def _corner(box: Any, image_size: tuple[int, int] | None) -> tuple[bool, bool] | None:
    """The corner (left?, top?) a small text block sits in, or None when it is not in one."""
    if not box or not image_size:
        return None
    try:
        xs = [float(p[0]) for p in box]
        ys = [float(p[1]) for p in box]
        W, H = float(image_size[0]), float(image_size[1])
    except (TypeError, ValueError, IndexError):
        return None
    if W <= 0 or H <= 0:
        return None
    x0, x1, y0, y1 = min(xs) / W, max(xs) / W, min(ys) / H, max(ys) / H
    small = (x1 - x0) < 0.4 and (y1 - y0) < 0.12
    side = x1 < 0.4 or x0 > 0.6
    edge = y1 < CORNER_BAND or y0 > 1 - CORNER_BAND
    return (x1 < 0.4, y1 < CORNER_BAND) if small and side and edge else None


#: Height band (fraction of the image) at the top/bottom edge where small side text is a logo.
CORNER_BAND = 0.18
#: A corner holding this many lines or more is a caption (a speech bubble), not a logo.
CORNER_CAPTION_LINES = 3


def _corner_marks(lines: list[dict[str, Any]], image_size: tuple[int, int] | None) -> set[int]:
    """Indexes of lines that are logos: small text in a corner with fewer than
    CORNER_CAPTION_LINES lines in that corner (TV-station logos are one or two lines)."""
    corners = [_corner(d.get("box"), image_size) for d in lines]
    counts = Counter(c for c in corners if c is not None)
    return {i for i, c in enumerate(corners) if c is not None and counts[c] < CORNER_CAPTION_LINES}


def clean_ocr_lines(
    ocr_lines: Iterable[Any], min_score: float = OCR_MIN_SCORE, image_size: tuple[int, int] | None = None
) -> list[dict[str, Any]]:
    """Keep OCR lines worth indexing: score >= ``min_score``, not watermark-like, at least two
    letters/ideographs (or one ideograph with score >= 0.95). With ``image_size`` (width,
    height in the pixel space of the line boxes) small text blocks in the corners are dropped
    too. Accepts OcrLine objects or dicts; returns ``[{"text", "score"}]`` in input order,
    folded duplicates removed; a line read with a box keeps it (``"box": [[x, y] × 4]``, pixels of the
    upright frame, and ``"frame"``: the frame it was read on), which re-captioning writes in."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    lines = [_line_dict(raw) for raw in ocr_lines or []]
    marks = _corner_marks(lines, image_size)
    for index, d in enumerate(lines):
        text = re.sub(r"\s+", " ", unicodedata.normalize("NFKC", d["text"])).strip()
        if not text or d["score"] < min_score:
            continue
        if _WATERMARK.search(text):
            continue
        if index in marks:
            continue
        letters = [c for c in text if c.isalpha()]
        if not letters:
            continue
        if len(letters) < 2 and not (has_han(text) and d["score"] >= 0.95):
            continue
        key = "".join(c for c in fold(text) if c.isalnum())
        if key in seen:
            continue
        seen.add(key)
        kept: dict[str, Any] = {"text": text, "score": round(d["score"], 4)}
        if d["box"]:
            kept.update(box=[[int(x), int(y)] for x, y in d["box"]], frame=int(d["frame"]))
        out.append(kept)
    return out


def detect_language(texts: Sequence[str]) -> str:
    """``"zh"`` / ``"en"`` / ``"mixed"`` / ``"unknown"`` from Han vs Latin letter counts
    (a script with < 20 % of the letters is ignored)."""
    han = latin = 0
    for t in texts:
        for c in unicodedata.normalize("NFKC", t or ""):
            if has_han(c):
                han += 1
            elif c.isascii() and c.isalpha():
                latin += 1
    # a Chinese character carries roughly a word; weight Latin letters per ~4-letter word
    han_w, lat_w = han, latin / 4.0
    tot = han_w + lat_w
    if tot < 1:
        return "unknown"
    if han_w / tot >= 0.8:
        return "zh"
    if lat_w / tot >= 0.8:
        return "en"
    return "mixed"


def _label_texts(labels: Sequence[dict | str] | None) -> list[str]:
    out: list[str] = []
    for lab in labels or []:
        if isinstance(lab, str):
            if lab.strip():
                out.append(lab.strip())
            continue
        if not isinstance(lab, dict):
            continue
        score = lab.get("score", lab.get("confidence", 1.0))
        try:
            if float(score) < LABEL_MIN_SCORE:
                continue
        except (TypeError, ValueError):
            pass
        for key in ("label", "name", "en", "label_en", "zh", "label_zh", "text"):
            v = lab.get(key)
            if isinstance(v, str) and v.strip():
                out.append(v.strip())
    return list(dict.fromkeys(out))


def build_meme_context(
    *,
    relative_path: str,
    display_name: str,
    ocr_lines: Sequence[Any],
    labels: list[dict] | None = None,
    image_size: tuple[int, int] | None = None,
    ocr_min_score: float = OCR_MIN_SCORE,
) -> dict[str, Any]:
    """Build the meme context from the path and what was read off the image.

    relative_path: path the file was stored under, relative to the import root
        (``drake/yes.jpg``, ``004_SmirkBoy/SmirkBoy00004.gif``); ``/`` or ``\\`` separators.
    display_name: the meme's current display name (defaults to the file name on import).
    ocr_lines: OcrLine objects or ``{"text", "score"}`` dicts, in reading order.
    labels: optional image labels from the visual stage, dicts with a text under ``label`` /
        ``name`` / ``en`` and/or ``zh`` / ``label_zh``, optional ``score``.
    image_size: optional ``(width, height)`` of the frames the OCR boxes refer to; enables
        the corner-logo rule (small text in a corner band is dropped).

    Returns a JSON-able dict::

        {"version": "ctx-1",
         "title": str,                    # display title: caption-like name, else OCR, else folder
         "name_text": str,                # readable words of stem (+ folder), e.g. "yes drake"
         "stem_words": [str],             # the stem's (or display name's) words alone, e.g. ["yes"]
         "folder": str | None,            # nearest non-generic folder name, raw
         "folders": [str],
         "source_name_tokens": [str],     # folded keyword tokens from stem + folders
         "ocr_text": str,                 # kept lines joined with "\\n"
         "ocr_lines": [{"text", "score", "box"?, "frame"?}],  # kept lines
         "ocr_line_count_raw": int,
         "labels": [str],
         "language": "zh" | "en" | "mixed" | "unknown"}

    Never raises on odd input (empty path, no OCR) — fields are just empty.
    """
    np_ = name_parts(relative_path, display_name)
    lines = clean_ocr_lines(ocr_lines, ocr_min_score, image_size)
    ocr_text = "\n".join(line["text"] for line in lines)
    label_texts = _label_texts(labels)
    stem_words, folder_words = np_["stem_words"], np_["folder_words"]
    name_text = " ".join(stem_words + folder_words)

    tokens: list[str] = []
    raw_segments = ([] if is_generic_segment(np_["stem"]) else [np_["stem"]]) + list(np_["folders"])
    for w in stem_words + folder_words + raw_segments:
        # raw segments add the joined compounds (``smirkboy``, ``grumpycat``)
        w = re.sub(r"\d+", " ", unicodedata.normalize("NFKC", w))
        tokens.extend(t for t in tokenize(w) if not t.isdigit() and t not in GENERIC_NAMES)
    tokens = list(dict.fromkeys(tokens))

    if stem_words:
        title = " ".join(_readable_title(np_["stem"]))
        if len(stem_words) == 1 and not has_han(title) and folder_words:
            title = " ".join(folder_words[-2:] + [title])  # drake/yes.jpg -> "drake yes"
    elif folder_words:
        title = " ".join(folder_words)
    elif lines:
        title = max(lines, key=lambda line: len(line["text"]))["text"]
    else:
        title = ""
    title = title[:120]

    return {
        "version": CONTEXT_VERSION,
        "title": title,
        "name_text": name_text,
        "stem_words": stem_words,
        "folder": np_["folders"][-1] if np_["folders"] else None,
        "folders": np_["folders"],
        "source_name_tokens": tokens,
        "ocr_text": ocr_text,
        "ocr_lines": lines,
        "ocr_line_count_raw": len(list(ocr_lines or [])),
        "labels": label_texts,
        "language": detect_language([ocr_text, name_text]),
    }


def _readable_title(stem: str) -> list[str]:
    seg = unicodedata.normalize("NFKC", stem)
    out = []
    for chunk in re.split(r"[_\-]+", seg):
        chunk = re.sub(r"\d+$", "", chunk).strip()
        if chunk and not is_generic_segment(chunk):
            out.append(chunk if has_han(chunk) else " ".join(split_compound(chunk)))
    return out or [seg]


def apply_text_correction(context: dict[str, Any], text: str | None) -> dict[str, Any]:
    """A copy of ``context`` saying ``text`` instead of what OCR read (issue 43), or, with ``None``, what
    OCR read again (a correction undone; a context never corrected comes back unchanged).

    The corrected context's ``ocr_text`` is ``text``'s non-blank lines, its ``ocr_lines`` those lines
    with score 1 (sure text: it may name the meme), its ``title`` follows when it was taken from the
    OCR text, and ``language`` is detected again. What OCR read is kept under ``text_correction``
    (``{"ocr_text", "ocr_lines", "title"}``) for the undo; a second correction keeps the first original.
    """
    out = dict(context)
    original = out.pop("text_correction", None)
    if isinstance(original, dict):  # back to what OCR read before anything else
        out.update({k: original.get(k) for k in ("ocr_text", "ocr_lines", "title")})
    if text is not None:
        read_lines = [str(line.get("text") or "") for line in out.get("ocr_lines") or [] if isinstance(line, dict)]
        title = out.get("title") or ""
        out["text_correction"] = {k: out.get(k) for k in ("ocr_text", "ocr_lines", "title")}
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        out["ocr_text"] = "\n".join(lines)
        out["ocr_lines"] = [{"text": line, "score": 1.0} for line in lines]
        if not title or title in read_lines:  # the title was the longest line OCR read: the corrected one now
            out["title"] = max(lines, key=len)[:120] if lines else ""
    out["language"] = detect_language([out.get("ocr_text") or "", out.get("name_text") or ""])
    return out
