"""Issue 46: a command's exit status means the same in every command. Every exit in
``src/mewdex/cli`` goes through :class:`mewdex.cli.common.ExitCode` (no bare number), ``--help``
says what each status means, and the README's table says the same words."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import mewdex.cli
from mewdex.cli.common import EXIT_MEANINGS, ExitCode, exit_for, exit_for_status

CLI = Path(mewdex.cli.__file__).parent
README = Path(__file__).resolve().parents[2] / "README.md"


def _exits() -> list[tuple[str, int, ast.expr | None]]:
    found = []
    for path in sorted(CLI.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name in ("Exit", "SystemExit", "exit"):
                    found.append((f"{path.name}:{node.lineno}", name, node.args[0] if node.args else None))
    return found


def test_every_exit_goes_through_the_exit_codes():
    exits = _exits()
    assert len(exits) > 50
    # A web process of `serve` (cli/web_processes.py) exits with uvicorn's STARTUP_FAILURE when it
    # could not start: its status is read by its parent, not by a caller of a command.
    bare = [
        where
        for where, _, arg in exits
        if arg is not None
        and not any(name in ast.unparse(arg) for name in ("ExitCode.", "STARTUP_FAILURE"))
        and not ast.unparse(arg).startswith("exit_for")
    ]
    assert not bare, f"exit statuses as bare numbers: {bare}"


def test_help_and_readme_say_what_each_status_means():
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    main = subprocess.run([sys.executable, "-m", "mewdex", "--help"], env=env, capture_output=True, text=True)
    one = subprocess.run(
        [sys.executable, "-m", "mewdex", "tasks", "show", "--help"], env=env, capture_output=True, text=True
    )
    readme = README.read_text()
    for code in ExitCode:
        name = code.name.lower().replace("_", " ")
        assert f"{code.value} {name}: {EXIT_MEANINGS[code]}" in " ".join(main.stdout.split()), main.stdout
        assert f"{code.value} {name}" in one.stdout, one.stdout
        assert f"| {code.value} | {name} | {EXIT_MEANINGS[code]} |" in readme


def test_error_codes_and_http_statuses_map_to_one_meaning():
    assert exit_for("not_found") == exit_for("task_not_found") == exit_for_status(404) == ExitCode.NOT_FOUND
    assert exit_for("revision_conflict") == exit_for_status(412) == exit_for_status(409) == ExitCode.CONFLICT
    assert exit_for("display_name_invalid") == exit_for_status(422) == ExitCode.USAGE
    assert exit_for("queue_full") == exit_for_status(503) == exit_for_status(429) == ExitCode.UNAVAILABLE
    assert exit_for("something_else") == exit_for_status(500) == ExitCode.FAILED
