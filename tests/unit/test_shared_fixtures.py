"""The suite's shared fixtures (tests/conftest.py and the helper modules its ``pytest_plugins`` registers)
have one definition per name, and test files ask for them by name instead of importing them."""

from __future__ import annotations

import ast
from pathlib import Path

import conftest

TESTS = Path(conftest.__file__).parent


def _module_path(name: str) -> Path:
    [path] = [p for p in (TESTS / f"{name}.py", *TESTS.glob(f"*/{name}.py")) if p.is_file()]
    return path


def _fixtures(path: Path) -> list[str]:
    names = []
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and any("fixture" in ast.unparse(d) for d in node.decorator_list):
            names.append(node.name)
    return names


def _shared() -> dict[str, list[str]]:
    where: dict[str, list[str]] = {}
    for path in [TESTS / "conftest.py", *(_module_path(m) for m in conftest.pytest_plugins)]:
        for name in _fixtures(path):
            where.setdefault(name, []).append(str(path.relative_to(TESTS)))
    return where


def test_every_shared_fixture_name_is_defined_once():
    where = _shared()
    assert {"sessions", "scope", "auth_app", "account", "s3_server", "browser"} <= set(where)
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}


def test_no_test_file_imports_a_shared_fixture():
    shared = set(_shared())
    homes = {"conftest", *conftest.pytest_plugins}
    imports = []
    for path in sorted(TESTS.rglob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in homes:
                imports += [f"{path.relative_to(TESTS)}: {a.name}" for a in node.names if a.name in shared]
    assert imports == []
