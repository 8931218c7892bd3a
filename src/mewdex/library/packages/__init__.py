"""Collection ZIP packages, format ``mewdex-collection`` version 1.

Layout::

    manifest.json          {"format": "mewdex-collection", "version": 1,
                            "collection": {"name"}, "exported_at": ISO-8601 UTC,
                            "items": [{"file": "images/<entry>", "display_name", "extension",
                                       "size": bytes, "sha256": hex}, ...]}   # member order
    images/<entry>         the original bytes, stored (images are compressed already)

Entry names are made safe for every file system (no ``<>:"/\\|?*`` or control characters, no
trailing dots or spaces, no Windows device names such as ``CON`` or ``COM1``, at most 150 UTF-8
bytes) and unique ignoring case and Unicode normalisation (``Café.png``, ``Café (1).png``); the
manifest keeps the real display names, so an import restores them.

The package is split by concern: :mod:`.zipformat` (names, limits, the guarded entry reader),
:mod:`.export` and :mod:`.imports`; this module re-exports their public names.

A selection of memes exports in the same layout (:func:`plan_selection`, ``POST /api/v1/memes/zip``; the
manifest's collection name is ``mewdex <date>``).

Export streams: :func:`stream_zip` yields the archive chunk by chunk (data descriptors, no
seeking, no temporary file). Import (:func:`import_package`) reads a seekable ZIP (a spooled
upload or a file) and writes nothing until a preflight has checked the whole archive:

* paths: absolute, drive (``C:``), parent (``..``) or backslash paths and symlinks → 422
  ``unsafe_path`` (details list every bad entry);
* size: at most ``zip_max_items`` images (413 ``too_many_items``); every entry is inflated and
  counted on the bytes actually produced, never on header sizes: per entry at most
  ``max_upload_bytes`` (413 ``entry_too_large``), in total ``zip_max_total_bytes`` (413
  ``package_too_large``), and at most ``zip_max_ratio`` × the compressed bytes read once past
  1 MiB (413 ``compression_ratio_exceeded``); inflation stops at the first limit;
* integrity: CRC and size must match the headers (422 ``zip_corrupt``); encrypted entries and
  methods other than stored/deflated → 422 ``zip_unsupported``; not a ZIP → 422 ``zip_invalid``;
  a manifest that is not v1 → 422 ``manifest_invalid``;
* images: each is decoded (``library.images.probe``); an undecodable one, or one whose bytes
  differ from the manifest's sha256, is reported ``rejected`` and not imported; when no image is
  importable the archive is refused (422 ``no_images``), except a package whose manifest lists
  no members (an empty collection).

Names without the ZIP UTF-8 flag are decoded from the Info-ZIP Unicode path field when present,
else tried as UTF-8, then GBK, then Shift-JIS, else CP437. The collection is created with the
manifest's name (or the given one, or the file name); a taken name gets a `` (2)`` suffix.
"""

from mewdex.library.packages.export import (  # noqa: F401
    MAX_SELECTION,
    ExportEntry,
    ExportPlan,
    content_disposition,
    export_to_file,
    plan_export,
    plan_selection,
    stream_zip,
)
from mewdex.library.packages.imports import (  # noqa: F401
    ImportResult,
    ItemResult,
    Plan,
    PlannedItem,
    import_package,
    open_archive,
    preflight,
)
from mewdex.library.packages.zipformat import (  # noqa: F401
    FORMAT,
    IMAGES_DIR,
    MANIFEST,
    VERSION,
    Limits,
    PackageError,
    central_directory_size,
    decode_entry_name,
    inflate,
    safe_entry_stem,
    unique_entry_names,
    unsafe_reason,
)
