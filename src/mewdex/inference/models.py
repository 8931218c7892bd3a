"""Process-wide model instances, loaded lazily on first use and shared by all worker threads.

Text embedders are the ``text_embedders`` hook of :mod:`mewdex.hooks`: named factories (``e5``,
``use`` built in; :func:`register_text_embedder` or a plugin adds more, e.g. an optional local
model). ``MEWDEX_TEXT_MODELS`` maps each vector leg of search (``e5``, ``use``) to a registered
name; changing it (or a model's version) makes the next start-up build new search generations
(``mewdex.search.generations``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import lru_cache

from mewdex import hooks
from mewdex.config import get_settings


@lru_cache(maxsize=1)
def ocr_engine():
    """The OCR engine (RapidOCR PP-OCR via onnxruntime); see :mod:`mewdex.inference.ocr`."""
    from mewdex.inference.ocr import OcrEngine

    return OcrEngine(intra_op_threads=get_settings().ocr_threads)


def _e5():
    from mewdex.inference.embedders import E5Embedder

    return E5Embedder(query_threads=get_settings().query_embedding_threads)


def _use():
    from mewdex.inference.embedders import UseEmbedder

    return UseEmbedder()


# The built-in embedders: this module is the plugin of the ``text_embedders`` hook's built-ins.
hooks.provide("text_embedders", "e5", _e5)
hooks.provide("text_embedders", "use", _use)
_INSTANCES: dict[str, object] = {}
#: The vector legs of text search (``MEWDEX_TEXT_MODELS`` keys); each scores its own fields
#: (``mewdex.search.documents.FIELDS_BY_EMBEDDER``).
TEXT_LEGS = ("e5", "use")
_LOCK = threading.Lock()


def register_text_embedder(name: str, factory: Callable[[], object]) -> None:
    """Make ``factory()`` (a :class:`~mewdex.inference.embedders.TextEmbedder`) available as ``name``
    for ``MEWDEX_TEXT_MODELS``; re-registering a name replaces its instance."""
    with _LOCK:
        hooks.provide("text_embedders", name, factory, stacklevel=2)
        _INSTANCES.pop(name, None)


def text_embedder(name: str):
    """The shared instance of the registered embedder ``name``; KeyError when not registered.
    Constructing is cheap: weights load on first use."""
    factory = hooks.get("text_embedders", name)
    if factory is None:
        raise KeyError(name)
    with _LOCK:
        if name not in _INSTANCES:
            _INSTANCES[name] = factory()
        return _INSTANCES[name]


def text_embedders() -> dict:
    """The configured text embedder of each vector leg (``{"e5": ..., "use": ...}``); each embeds its
    own fields of the context (``mewdex.search.documents.FIELDS_BY_EMBEDDER``) and search takes each
    meme's best field. ValueError when ``MEWDEX_TEXT_MODELS`` names an unregistered embedder."""
    configured = get_settings().text_models
    if not configured or set(configured) - set(TEXT_LEGS):
        raise ValueError(f"MEWDEX_TEXT_MODELS must map legs among {sorted(TEXT_LEGS)} to embedder names")
    known = {name for name in set(configured.values()) if hooks.get("text_embedders", name) is not None}
    unknown = sorted(set(configured.values()) - known)
    if unknown:
        every = sorted(hooks.implementations("text_embedders"))
        raise ValueError(f"MEWDEX_TEXT_MODELS names unknown text embedders {unknown}; known: {every}")
    return {leg: text_embedder(name) for leg, name in configured.items()}


def embedder_for_model(model: str):
    """The registered embedder whose ``model`` id is ``model`` (to embed queries for a generation
    built with it), or None when no registered embedder has that id any more."""
    for name in list(hooks.implementations("text_embedders")):
        try:
            embedder = text_embedder(name)
        except Exception:  # a factory that cannot even construct is simply not that model
            continue
        if embedder.model == model:
            return embedder
    return None
