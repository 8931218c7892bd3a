"""Blob store backends and the storage-operation journal."""

from __future__ import annotations

from functools import lru_cache

from mewdex.config import get_settings


@lru_cache(maxsize=1)
def blob_store():
    """The configured blob store (local filesystem under ``$MEWDEX_DATA_DIR/blobs``)."""
    from mewdex.storage.blobs import LocalBlobStore

    return LocalBlobStore(get_settings().blob_root)
