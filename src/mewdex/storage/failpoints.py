"""Failpoints for crash tests: ``MEWDEX_FAILPOINT=<step>`` makes the process exit at that step.

:func:`hit` is called at every step boundary of an upload, a rename and a delete (the names are
in :data:`FAILPOINTS`). When the variable names the step, the process ends at once with
``os._exit(EXIT_CODE)`` — no ``finally`` blocks, no commit, no flush, exactly like a kill.
Unset (production), :func:`hit` is one comparison against ``None``.
"""

from __future__ import annotations

import os

EXIT_CODE = 86

# Step boundaries, in the order each operation passes them.
FAILPOINTS = {
    "upload": ("upload.after_prepare", "upload.after_blob_write", "upload.after_commit"),
    "rename": ("rename.after_prepare", "rename.before_commit", "rename.after_commit"),
    "delete": ("delete.before_rows_commit", "delete.after_rows_deleted", "delete.after_blob_delete",
               "delete.after_complete"),
}

_ACTIVE = os.environ.get("MEWDEX_FAILPOINT") or None


def hit(step: str) -> None:
    """Exit the process with :data:`EXIT_CODE` if ``MEWDEX_FAILPOINT`` (read at import) names ``step``."""
    if _ACTIVE is not None and _ACTIVE == step:
        os._exit(EXIT_CODE)
