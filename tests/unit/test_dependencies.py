"""Dependencies that earn their place (issue 46, point 4): one HTTP client stack in mewdex's code, no SciPy
stack for one perceptual hash, tzdata and OpenCC declared, and lock files whose every pin carries the
sha256 hashes ``make install`` requires."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import mewdex

ROOT = Path(__file__).resolve().parents[2]
SRC = Path(mewdex.__file__).parent


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[<>=!~\[ ;]", requirement, maxsplit=1)[0]).lower()


def runtime_dependencies() -> set[str]:
    return {_name(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]}


def imported_roots() -> dict[str, set[str]]:
    """``{top-level module: {files of src/mewdex importing it}}`` (lazy imports inside functions too)."""
    found: dict[str, set[str]] = {}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for n in names:
                found.setdefault(n.split(".")[0], set()).add(str(path.relative_to(SRC)))
    return found


def lock_entries(name: str) -> dict[str, list[str]]:
    """``{package: [its sha256 hashes]}`` of a lock file in pip's hash-checking format."""
    entries: dict[str, list[str]] = {}
    current = None
    for line in (ROOT / name).read_text().splitlines():
        if re.match(r"^[A-Za-z0-9]", line):
            assert "==" in line, line
            current = _name(line.split("==")[0])
            entries[current] = []
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})", line)
        if hashes:
            assert current is not None, line
            entries[current] += hashes
    return entries


def test_mewdex_speaks_one_http_client_stack():
    roots = imported_roots()
    assert roots.get("httpx2") == {"egress.py"} and roots.get("httpcore2") == {"egress.py"}
    assert "httpx" not in roots and "httpcore" not in roots, (roots.get("httpx"), roots.get("httpcore"))
    deps = runtime_dependencies()
    assert {"httpx2", "httpcore2"} <= deps and not {"httpx", "httpcore"} & deps


def test_no_scipy_stack_for_the_perceptual_hash():
    roots = imported_roots()
    assert not {"imagehash", "scipy", "pywt"} & set(roots)
    assert not {"imagehash", "scipy", "pywavelets"} & runtime_dependencies()
    assert not {"imagehash", "scipy", "pywavelets"} & set(lock_entries("requirements.lock"))


def test_tzdata_and_opencc_are_declared_and_locked():
    runtime = lock_entries("requirements.lock")
    assert {"tzdata", "opencc"} <= runtime_dependencies() and {"tzdata", "opencc"} <= set(runtime)


def test_every_pin_of_both_locks_carries_hashes_and_make_install_requires_them():
    runtime, test = lock_entries("requirements.lock"), lock_entries("requirements-test.lock")
    assert len(runtime) > 50 and len(test) > 20
    assert not set(runtime) & set(test), "one pin per package"
    assert all(runtime.values()) and all(test.values()), [p for p, h in {**runtime, **test}.items() if not h]
    makefile = (ROOT / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if re.search(r"pip install .*-r requirements", line)]
    assert installs and all("--require-hashes" in line for line in installs), installs
    lock_rule = makefile.split("\nlock:", 1)[1].split("\n\n", 1)[0]
    assert "pip-compile $(LOCK_FLAGS)" in lock_rule and "--generate-hashes" in makefile.split("LOCK_FLAGS :=", 1)[1]
