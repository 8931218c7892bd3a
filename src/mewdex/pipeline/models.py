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
    """The text embedders by vector leg (``e5``, ``use``); each embeds its own fields of the context
    (``mewdex.pipeline.context.FIELDS_BY_EMBEDDER``) and search takes each meme's best field."""
    from mewdex.pipeline.embedders import E5Embedder, UseEmbedder

    return {"e5": E5Embedder(), "use": UseEmbedder()}
