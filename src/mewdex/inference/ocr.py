"""OCR of meme images with RapidOCR (PP-OCRv6 det/rec, zh+en, onnxruntime).

Model source: the ONNX weights ship inside the ``rapidocr==3.10.0`` wheel
(``rapidocr/models/PP-OCRv6_det_small.onnx``, ``PP-OCRv6_rec_small.onnx``,
``ch_ppocr_mobile_v2.0_cls_mobile.onnx``); nothing is downloaded. The text-line angle classifier
is off: it only turns upside-down lines, which memes hardly have, and cost ~5 % of OCR time (on 60
sampled memes it changed one watermark line).

Usage::

    engine = OcrEngine()                      # cheap; models load on first read()
    lines = engine.read([frame0, frame_mid])  # PIL RGB images -> list[OcrLine]

Threading: ``RapidOCR.__call__`` mutates per-call settings on the instance, so instances are
not shared between threads; ``OcrEngine`` keeps one lazily created RapidOCR instance per
calling thread (creation is guarded by a lock). Each onnxruntime session is limited to
``intra_op_threads`` (default 1) so that N worker threads use about N cores.

Speed (2-core machine, 1 intra-op thread, measured by ``bench/lab_text_recipe.py``): see the
lab's output; about 0.3-0.4 s/image with the defaults below, 0.9-1.0 s/image with RapidOCR's
own detection defaults.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import BackendUnavailable

__all__ = ["OcrLine", "OcrEngine", "DEFAULT_MIN_SCORE"]

#: RapidOCR's own recognition-score floor used when reading; lines between this and the
#: context threshold are kept in the raw result so the threshold can be changed without re-OCR.
DEFAULT_MIN_SCORE = 0.5


@dataclass(frozen=True)
class OcrLine:
    """One recognised text line.

    text:  recognised text as returned by the model (not folded), stripped.
    score: recognition confidence in [0, 1] (mean character probability).
    box:   4 corner points ``[[x, y], ...]`` (ints, pixels of the frame it came from,
           clockwise from top-left), or None.
    frame: index of the input image the line was read from (first occurrence).
    """

    text: str
    score: float
    box: list[list[int]] | None = None
    frame: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "score": round(float(self.score), 4), "box": self.box, "frame": self.frame}


def _dedupe_key(text: str) -> str:
    # Same caption on several frames of a GIF: compare without whitespace/punctuation/case.
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def _lanczos():
    from PIL import Image

    return Image.Resampling.LANCZOS


@dataclass(eq=False)
class OcrEngine:
    """Thread-safe, lazily loaded RapidOCR wrapper.

    intra_op_threads: onnxruntime intra-op threads per session (default 1).
    min_score: drop lines whose recognition score is below this (RapidOCR ``text_score``).
    max_side_len: images are downscaled (Lanczos) so their long side is at most this many
        pixels before OCR; meme captions stay legible and big screenshots get much faster.
    det_limit_side_len / det_limit_type: text-detection input size. RapidOCR's default
        (``min``/736) *upscales* every small image so its short side is >= 736 px, which made
        detection ~75 % of the time; ``max``/960 halves OCR time with the same captions, and
        ``max``/640 is another ~25 % faster, and ``max``/480 another ~30 % (det 101 → 56 ms,
        rec 105 → 90 ms per image): on 60 random corpus images the captions read identically at
        640 and 480; the 19 that differ lose or change only small watermark/logo lines.
    arena: onnxruntime's CPU memory arena (RapidOCR turns it off; on it is ~4 % faster, since
        every image has a different input shape and would otherwise allocate afresh).
    """

    intra_op_threads: int = 1
    min_score: float = DEFAULT_MIN_SCORE
    max_side_len: int = 1280
    det_limit_side_len: int = 480
    det_limit_type: str = "max"
    arena: bool = True
    _local: threading.local = field(default_factory=threading.local, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _failure: str | None = field(default=None, init=False, repr=False)

    model: str = field(default="rapidocr@3.10.0/PP-OCRv6-small", init=False)

    def _engine(self):
        eng = getattr(self._local, "engine", None)
        if eng is not None:
            return eng
        with self._lock:
            if self._failure is not None:
                raise BackendUnavailable(self._failure, backend="rapidocr")
            try:
                from rapidocr import RapidOCR

                params = {
                    "Global.log_level": "error",
                    "Global.text_score": float(self.min_score),
                    "Global.use_cls": False,
                    "EngineConfig.onnxruntime.intra_op_num_threads": int(self.intra_op_threads),
                    "EngineConfig.onnxruntime.inter_op_num_threads": 1,
                    "EngineConfig.onnxruntime.enable_cpu_mem_arena": bool(self.arena),
                    "Det.limit_side_len": int(self.det_limit_side_len),
                    "Det.limit_type": str(self.det_limit_type),
                }
                eng = RapidOCR(params=params)
                # Force the sessions to load now (RapidOCR loads them on first call).
                eng._load_det_model()
                eng._load_rec_model()
            except Exception as exc:  # ImportError, missing model files, ORT failures
                self._failure = f"RapidOCR could not be loaded: {type(exc).__name__}: {exc}"
                raise BackendUnavailable(self._failure, backend="rapidocr") from exc
        self._local.engine = eng
        return eng

    def load(self) -> None:
        """Load the models for the calling thread now (raises BackendUnavailable)."""
        self._engine()

    def read(self, images: Sequence[Any]) -> list[OcrLine]:
        """OCR each image (PIL ``RGB`` images, e.g. key frames of one meme) and merge the lines.

        Returns lines in reading order of the first frame they appear in; a line whose
        alphanumeric-folded text was already seen on an earlier frame is dropped (the higher
        score is kept). Empty list when no text. Raises BackendUnavailable if the engine cannot
        load; an image that fails inside the engine is skipped (treated as text-less).
        """
        import numpy as np

        eng = self._engine()
        merged: dict[str, OcrLine] = {}
        for idx, img in enumerate(images):
            if getattr(img, "mode", "RGB") != "RGB":
                img = img.convert("RGB")
            w, h = img.size
            scale = 1.0
            if self.max_side_len and max(w, h) > self.max_side_len:
                scale = self.max_side_len / float(max(w, h))
                img = img.resize((max(1, round(w * scale)), max(1, round(h * scale))), _lanczos())
            arr = np.asarray(img)[:, :, ::-1]  # RapidOCR works in BGR for ndarray input
            arr = np.ascontiguousarray(arr)
            try:
                out = eng(arr)
            except Exception:  # engine-level failure on one frame
                continue
            txts = getattr(out, "txts", None) or ()
            scores = getattr(out, "scores", None) or ()
            boxes = getattr(out, "boxes", None)
            for j, (t, s) in enumerate(zip(txts, scores, strict=False)):
                t = (t or "").strip()
                key = _dedupe_key(t)
                if not key:
                    continue
                box = None
                if boxes is not None and j < len(boxes):
                    # back to the input frame's pixel coordinates
                    box = [[int(round(float(x) / scale)), int(round(float(y) / scale))] for x, y in boxes[j]]
                prev = merged.get(key)
                if prev is None:
                    merged[key] = OcrLine(text=t, score=float(s), box=box, frame=idx)
                elif float(s) > prev.score:
                    merged[key] = OcrLine(
                        text=prev.text if len(prev.text) >= len(t) else t,
                        score=float(s),
                        box=prev.box,
                        frame=prev.frame,
                    )
        return list(merged.values())

    def timed_read(self, images: Sequence[Any]) -> tuple[list[OcrLine], float]:
        """Like read(); also returns elapsed wall seconds."""
        t0 = time.perf_counter()
        lines = self.read(images)
        return lines, time.perf_counter() - t0
