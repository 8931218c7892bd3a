"""The ``visual`` stage: safe decode, thumbnails, perceptual hash, image embedding, ImageNet labels,
near-duplicates. The model is :mod:`mewdex.inference.visual_model`; the near-duplicate search and
its thresholds are :mod:`mewdex.search.near_duplicates`. Its model names are re-exported here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import delete
from sqlalchemy.orm import Session

from mewdex.inference.errors import BackendUnavailable
from mewdex.inference.visual_model import (  # noqa: F401 - the model's names, re-exported for the stage's callers
    DIMENSIONS,
    MODEL_ID,
    PREPROCESS_VERSION,
    VisualModel,
    context_labels,
    hamming,
    phash_hex,
    phash_of,
    set_visual_model,
    top_labels,
    visual_model,
)
from mewdex.library import thumbnails as thumbs
from mewdex.library.images import ImageError
from mewdex.search.near_duplicates import (  # noqa: F401 - thresholds, re-exported
    COSINE_MIN,
    PHASH_MAX_DISTANCE,
    ensure_visual_index,
    record_near_duplicates,
)

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
        thumbs.store_thumbnails(
            session, blob_store(), namespace, meme, output.thumbnails, failure=output.thumbnail_error
        )
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
        record_near_duplicates(session, meme, output.vector, output.phash, output.model, output.preprocess_version)
