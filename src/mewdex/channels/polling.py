"""One poller for every channel whose messages are fetched rather than pushed (Telegram without a
public URL, ClawBot): an adapter with ``polls = True`` gets, from here, its lane ``<name>_poll``
(one poll at a time, all processes), its task type ``<name>_polling`` (one attempt: the next slot
polls again) and its schedule (every :meth:`~mewdex.channels.base.Adapter.poll_seconds`, in the
system scope). The task calls :meth:`~mewdex.channels.base.Adapter.poll`, unless its slot is more than
one interval old (polls that piled up while no worker ran are skipped, not run late one by one); the cursor is the
adapter's (a bot's ``update_offset`` in ``channel_bots``, a binding's ``get_updates_buf``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from mewdex.channels.base import UNBOUND_SCOPE, Adapter
from mewdex.channels.registry import ADAPTERS
from mewdex.queue.registry import Lane, RetryPolicy, TaskContext, TaskType, register_lane, register_task_type
from mewdex.queue.scheduler import Schedule


def lane_of(name: str) -> str:
    """The lane of channel ``name``'s polls."""
    return f"{name}_poll"


def task_type_of(name: str) -> str:
    """The task type of channel ``name``'s polls."""
    return f"{name}_polling"


def pollers() -> list[Adapter]:
    """The registered adapters that poll."""
    return [a for a in ADAPTERS.values() if a.polls]


def _handler(adapter: Adapter):
    def poll(ctx: TaskContext) -> dict[str, Any]:
        slot = ctx.payload.get("slot")
        if isinstance(slot, int) and slot < _schedule(adapter).slot(datetime.now(UTC)) - 1:
            # Polls queued while no worker ran (one per slot) are not run late one after another, each
            # for its whole length: only the current slot's poll and the one before it fetch.
            return {"skipped": "a later poll is due"}
        return adapter.poll(ctx.sessions, adapter.poll_seconds())

    poll.__doc__ = f"One poll of {adapter.name} (mewdex.channels.polling)."
    return poll


def register() -> None:
    """Declare each polling adapter's lane and task type (once per process; again is harmless)."""
    for adapter in pollers():
        register_lane(Lane(lane_of(adapter.name), concurrency=lambda: 1, listed=False))
        register_task_type(
            TaskType(
                name=task_type_of(adapter.name),
                handler=_handler(adapter),
                lane=lane_of(adapter.name),
                retry=RetryPolicy(max_attempts=1),
                # A poll mostly waits, and what it fetched commits with its cursor: a stopping worker
                # gives it back at once instead of waiting out the long poll (up to 50 s).
                abandonable=True,
            )
        )


def schedules() -> list[Schedule]:
    """A schedule per polling adapter: a poll every ``poll_seconds()`` (read at each tick)."""
    return [_schedule(a) for a in pollers()]


def _schedule(adapter: Adapter) -> Schedule:
    return Schedule(task_type_of(adapter.name), task_type_of(adapter.name), adapter.poll_seconds, UNBOUND_SCOPE)
