"""Failpoints for crash tests: ``MEWDEX_FAILPOINT=<step>`` makes the process exit at that step.

:func:`hit` is called at every step boundary of an upload, a rename and a delete (the names are
in :data:`FAILPOINTS`). When the variable names the step, the process ends at once with
``os._exit(EXIT_CODE)`` — no ``finally`` blocks, no commit, no flush, exactly like a kill.
Unset (production), :func:`hit` is one comparison against ``None``.

``MEWDEX_FAILPOINT=disk_full_after:<n>`` simulates a full disk instead: every blob write after the
first ``n`` of the process fails with ``OSError(ENOSPC)`` part-way (see :func:`disk_full`).
"""

from __future__ import annotations

import errno
import os
import threading

EXIT_CODE = 86

# Step boundaries, in the order each operation passes them.
FAILPOINTS = {
    "upload": ("upload.after_prepare", "upload.after_blob_write", "upload.after_commit"),
    "rename": ("rename.after_prepare", "rename.before_commit", "rename.after_commit"),
    "delete": (
        "delete.before_rows_commit",
        "delete.after_rows_deleted",
        "delete.after_blob_delete",
        "delete.after_complete",
    ),
}

_ACTIVE = os.environ.get("MEWDEX_FAILPOINT") or None


def hit(step: str) -> None:
    """Exit the process with :data:`EXIT_CODE` if ``MEWDEX_FAILPOINT`` (read at import) names ``step``."""
    if _ACTIVE is not None and _ACTIVE == step:
        os._exit(EXIT_CODE)


_DISK_FULL_AFTER = (
    int(_ACTIVE.split(":", 1)[1]) if _ACTIVE is not None and _ACTIVE.startswith("disk_full_after:") else None
)
_writes_lock = threading.Lock()
_writes_passed = 0


def disk_full(step: str) -> None:
    """Raise ``OSError(ENOSPC)`` at ``step`` once ``MEWDEX_FAILPOINT=disk_full_after:<n>`` and ``n``
    writes have passed in this process (each call is one write; a no-op when unset)."""
    global _writes_passed
    if _DISK_FULL_AFTER is None:
        return
    with _writes_lock:
        _writes_passed += 1
        if _writes_passed <= _DISK_FULL_AFTER:
            return
    raise OSError(errno.ENOSPC, f"No space left on device (failpoint {step})")
