"""``mewdex schedule add|list|runs|pause|resume|delete`` (issue 18, point 4), as a real process."""

from __future__ import annotations

import json


def test_schedule_commands(mewdex_env, scope):
    run = lambda *a: mewdex_env.cli("schedule", *a, scope=scope.scope_id)  # noqa: E731
    proc = run("add", "上班", "--cron", "0 9 * * 1-5", "--prompt", "上班", "--tz", "Asia/Shanghai", "--json")
    assert proc.returncode == 0, proc.stderr
    job = json.loads(proc.stdout)
    assert job["enabled"] and len(job["next_runs"]) == 5
    assert all(r["local"][11:16] == "09:00" and r["utc"][11:16] == "01:00" for r in job["next_runs"])
    human = run("add", "下班", "--cron", "0 18 * * *", "--prompt", "下班")
    assert human.returncode == 0 and "next: " in human.stdout and "18:00" in human.stdout

    listed = json.loads(run("list", "--json").stdout)["items"]
    assert {j["name"] for j in listed} == {"上班", "下班"}
    short = job["id"][:8]
    assert "上班" in run("list").stdout

    paused = run("pause", short)
    assert paused.returncode == 0 and "paused" in paused.stdout
    assert run("resume", job["id"]).returncode == 0
    assert json.loads(run("runs", short, "--json").stdout) == {"items": []}
    assert run("delete", short).returncode == 0
    assert {j["name"] for j in json.loads(run("list", "--json").stdout)["items"]} == {"下班"}

    bad = run("add", "x", "--cron", "61 * * * *", "--prompt", "x")
    assert bad.returncode == 2 and "cron_invalid" in bad.stderr and "Traceback" not in bad.stderr
    assert run("pause", "00000000").returncode == 4
