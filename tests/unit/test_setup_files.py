"""Set-up (issue 19, point 6): `make run` installs the runtime lock only; the test tools live in their own lock;
the README opens with a quickstart of five lines."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST_TOOLS = {"pytest", "pytest-timeout", "playwright", "schemathesis", "ruff", "mypy", "import-linter", "hypothesis"}


def pins(name: str) -> dict[str, str]:
    lines = (ROOT / name).read_text().splitlines()
    return {re.sub(r"[-_.]+", "-", line.split("==")[0]).lower(): line.split("==")[1] for line in lines if "==" in line}


def test_runtime_lock_has_no_test_tools_and_the_test_lock_has_them():
    runtime, test = pins("requirements.lock"), pins("requirements-test.lock")
    assert not TEST_TOOLS & set(runtime)
    assert TEST_TOOLS <= set(test)
    assert not set(runtime) & set(test)  # one pin per package
    for package in ("fastapi", "sqlalchemy", "onnxruntime", "rapidocr", "typer"):
        assert package in runtime


def test_make_run_installs_the_runtime_lock_only():
    makefile = (ROOT / "Makefile").read_text()
    stamp_rule = makefile.split("$(STAMP): pyproject.toml requirements.lock", 1)[1].split("\n\n", 1)[0]
    assert (
        "requirements.lock" in stamp_rule and "requirements-test.lock" not in stamp_rule and "[test]" not in stamp_rule
    )
    # the runtime stamp (and the font re-captioning draws with), never the test stamp
    assert re.search(r"^run: \$\(STAMP\)( fonts)?$", makefile, re.M)
    assert re.search(r"^test: \$\(TEST_STAMP\)", makefile, re.M)


def test_readme_opens_with_a_five_line_quickstart_and_two_commands():
    readme = (ROOT / "README.md").read_text()
    head = readme.split("## ", 1)[0]
    block = head.split("```sh\n", 1)[1].split("```", 1)[0]
    assert len(block.strip().splitlines()) == 5
    two = readme.split("## Quick start", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    assert len(two.strip().splitlines()) == 2
