"""Refresh ``tests/file_seconds.json``, the seconds each test file took in a run of the suite, which the
test processes' scheduler (``pytest_xdist_make_scheduler`` in ``tests/conftest.py``) hands out longest
first. Usage::

    .venv/bin/pytest -q -n 2 --dist loadfile --junitxml=/tmp/suite.xml
    .venv/bin/python tests/file_seconds.py /tmp/suite.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

OUT = Path(__file__).with_name("file_seconds.json")


def main(junit: str) -> None:
    seconds: Counter[str] = Counter()
    for case in ET.parse(junit).iter("testcase"):  # noqa: S314 - our own pytest's report
        seconds[(case.get("classname") or "").replace(".", "/") + ".py"] += float(case.get("time") or 0)
    OUT.write_text(json.dumps({k: round(v, 1) for k, v in sorted(seconds.items())}, indent=0) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
