"""Schedules (issue 18): cron jobs in the owner's time zone that deliver memes; a capability package
(docs/architecture.md "A capability is a package"). Below ``runtime`` and ``backups``; above
``channels`` and ``assistant``.

- ``cron`` (the schedule math, cronsim), ``clock`` (the schedules' clock), ``jobs`` (the
  scheduled-job service: create, edit, pause, delete, list; owner-scoped), ``dispatch`` (claiming
  due jobs, task type ``scheduled_job_dispatch``), ``runner`` (task type ``scheduled_job_run``, lane
  ``schedules``), ``delivery`` (webhook or channel), ``errors``;
- ``settings``: ``MEWDEX_SCHEDULE_*`` (:class:`~.settings.ScheduleSettings`, hook ``settings``);
- ``service``: the face the web layer, the command line, the runtime and backups call (contract
  ``schedules-face``);
- ``routes`` (the API and the page, imported by the web layer only), ``shapes`` (the API's request
  and response models), ``page.html`` (``schedules/page.html`` to the web layer's templates),
  ``static/`` (``schedules.js``, ``schedules.css``: served under ``/static/``), ``locales/{en,zh}.json``
  (its words, added to the catalogues when the package is imported).
"""

from __future__ import annotations

from pathlib import Path

from mewdex import hooks
from mewdex.capability import Capability, NavEntry
from mewdex.dto import i18n

i18n.add_messages(Path(__file__).parent / "locales")

#: Its declaration (hook ``capabilities``): its error codes → HTTP status, its page's link in the header,
#: what the web layer mounts (its routes, its templates, its static/ folder).
CAPABILITY = hooks.provide(
    "capabilities",
    "schedules",
    Capability(
        name="schedules",
        errors={
            "cron_invalid": 422,
            "cron_never_runs": 422,
            "schedule_invalid": 422,
            "schedule_too_frequent": 422,
            "schedule_limit_reached": 409,
        },
        nav=(NavEntry(page="schedules", path="/schedules", label="nav.schedules", order=70),),
        routes="mewdex.schedules.routes",
        templates=True,  # "schedules/page.html"
        static=True,  # schedules.js, schedules.css
    ),
)
