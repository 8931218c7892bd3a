"""The ``noop`` task type: a task that does nothing (queue tests, ``bench/task_queue.py``) and the
smallest example of a kind of work: one handler, one registration."""

from __future__ import annotations

import time
from typing import Any

from mewdex.queue.registry import TaskContext, TaskError, task_type


# external only when its payload says so; its observed costs are checked against a task's frozen
# analysis_policy, as the image stages' are (the budget is provided by name through the hook registry)
@task_type("noop", external=True, cost_budget="analysis_policy")
def noop(ctx: TaskContext) -> dict[str, Any]:
    """Payload, all optional: ``sleep`` seconds (only on attempts ≤ ``sleep_attempts`` when given;
    ``progress`` reports it), ``fail`` an error code to raise on every attempt (``retryable`` default
    true), ``external`` mark an external call as started first, ``cost`` to observe. Returns ``{"ok": true}``."""
    p = ctx.payload
    if p.get("external"):
        ctx.external_started(executor_attempt_id=f"noop-{ctx.claim.task_id}-{ctx.claim.attempt_count}")
    if p.get("cost") is not None:
        ctx.observe_cost(p["cost"])
    sleep = float(p.get("sleep") or 0)
    if p.get("sleep_attempts") is not None and ctx.claim.attempt_count > int(p["sleep_attempts"]):
        sleep = 0.0
    if sleep:
        steps = max(1, int(sleep / 0.5))
        for i in range(steps):
            time.sleep(sleep / steps)
            if p.get("progress"):
                ctx.progress((i + 1) / steps, f"step {i + 1}/{steps}")
    if p.get("fail"):
        raise TaskError(
            str(p["fail"]),
            str(p.get("message") or "the task failed on purpose"),
            retryable=bool(p.get("retryable", True)),
        )
    return {"ok": True}
