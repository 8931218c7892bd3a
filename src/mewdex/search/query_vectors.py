"""Query embeddings: the vector a leg's model gives a query, remembered per process.

Shared by the vector legs (:mod:`mewdex.search.service`) and the feedback leg
(:mod:`mewdex.search.feedback`), so a query embedded once for a search is not embedded again to
find its past neighbours or to store a feedback event.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from mewdex.inference import models
from mewdex.search import generations

QUERY_CACHE_SIZE = 1024
_query_cache: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
_query_cache_lock = threading.Lock()


def embedder_of(generation: generations.GenerationRef):
    """The registered embedder of ``generation``'s model when it gives vectors of the generation's
    dimensions, else None (the model is gone, or changed its width)."""
    embedder = models.embedder_for_model(generation.model)
    return embedder if embedder is not None and embedder.dimensions == generation.dimensions else None


def query_embedding(embedder, query: str) -> np.ndarray:
    """``embedder.embed_query(query)``, remembered for the last QUERY_CACHE_SIZE (model, query) pairs
    (search-as-you-type repeats its prefixes; the vector is read-only). Raises ``BackendUnavailable``."""
    key = (embedder.model, query)
    with _query_cache_lock:
        vector = _query_cache.get(key)
        if vector is not None:
            _query_cache.move_to_end(key)
            return vector
    vector = np.asarray(embedder.embed_query(query), dtype=np.float32)
    vector.setflags(write=False)
    with _query_cache_lock:
        _query_cache[key] = vector
        while len(_query_cache) > QUERY_CACHE_SIZE:
            _query_cache.popitem(last=False)
    return vector
