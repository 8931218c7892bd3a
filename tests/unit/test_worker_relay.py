"""A child worker's stderr reaches the parent's logging at the level it was logged at, without the
date, time and level the parent's format adds again (queue.worker)."""

import logging
import subprocess
import sys

from mewdex.queue.worker import _relay_stderr

_LINES = (
    "2026-12-03 04:05:10,420 INFO mewdex.queue.worker: worker vm:1:abc started\n"
    "2026-12-03 04:05:11,000 ERROR mewdex.queue.worker: task t-1 crashed\n"
    "Traceback (most recent call last):\n"
)


def test_a_childs_lines_keep_their_level_and_the_rest_is_a_warning(caplog) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", f"import sys; sys.stderr.write({_LINES!r})"], stderr=subprocess.PIPE
    )
    with caplog.at_level(logging.DEBUG, logger="mewdex.worker.child"):
        _relay_stderr(child)
    child.wait()
    got = [(r.levelname, r.getMessage().split("] ", 1)[1][:40]) for r in caplog.records]
    assert got == [
        ("INFO", "mewdex.queue.worker: worker vm:1:abc sta"),
        ("ERROR", "mewdex.queue.worker: task t-1 crashed"),
        ("WARNING", "Traceback (most recent call last):"),
    ]
