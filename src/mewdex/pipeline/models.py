"""Process-wide model instances, loaded lazily on first use and shared by all worker threads."""

from __future__ import annotations

from functools import lru_cache

from mewdex.config import get_settings


@lru_cache(maxsize=1)
def ocr_engine():
    """The OCR engine (RapidOCR PP-OCR via onnxruntime); see :mod:`mewdex.pipeline.ocr`."""
    from mewdex.pipeline.ocr import OcrEngine

    return OcrEngine(intra_op_threads=get_settings().ocr_threads)


@lru_cache(maxsize=1)
def text_embedders() -> dict:
    """The text embedders by role: ``fields`` (max over separate fields) and ``document`` (whole context)."""
    from mewdex.pipeline.embedders import E5Embedder, UseEmbedder

    return {"fields": E5Embedder(), "document": UseEmbedder()}
