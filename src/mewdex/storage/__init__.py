"""Blob store backends and the storage-operation journal."""

from __future__ import annotations

from functools import lru_cache

from mewdex.config import get_settings
from mewdex.storage.blobs import BlobStore


@lru_cache(maxsize=1)
def blob_store() -> BlobStore:
    """The configured blob store of this process: ``MEWDEX_BLOB_STORE=s3://bucket/prefix`` → an
    :class:`~mewdex.storage.s3.S3BlobStore`; unset → a :class:`~mewdex.storage.blobs.LocalBlobStore`
    under ``$MEWDEX_DATA_DIR/blobs``."""
    settings = get_settings()
    if settings.blob_store:
        from mewdex.storage import s3

        return s3.from_settings(
            settings.blob_store,
            endpoint_url=settings.s3_endpoint_url,
            region=settings.s3_region,
            addressing_style=settings.s3_addressing_style,
        )
    from mewdex.storage.blobs import LocalBlobStore

    return LocalBlobStore(settings.blob_root)
