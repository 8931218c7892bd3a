"""The schedules' clock: the current instant (aware, UTC) that decides which slots are due.

Production reads the system clock. ``MEWDEX_SCHEDULES_CLOCK_FILE`` (for tests, like
``MEWDEX_FAILPOINT``: read at every call) names a file holding an ISO instant, e.g.
``2027-03-28T01:00:05Z``; while it exists and parses, that instant is "now", so a test moves the
clock of real worker processes across many slots in seconds.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime


def now() -> datetime:
    """The current instant, aware UTC (the test clock file's instant when one is set)."""
    path = os.environ.get("MEWDEX_SCHEDULES_CLOCK_FILE")
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                value = f.read().strip()
            instant = datetime.fromisoformat(value.replace("Z", "+00:00"))
            if instant.tzinfo is not None:
                return instant.astimezone(UTC)
        except (OSError, ValueError):
            pass
    return datetime.now(UTC)
