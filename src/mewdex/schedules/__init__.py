"""Schedules (issue 18): cron jobs in the owner's time zone that deliver memes.

``cron`` (the schedule math, cronsim), ``jobs`` (the scheduled-job service: create, edit, pause,
delete, list; owner-scoped), ``dispatch`` (claiming due jobs and the run task type), ``delivery``
(webhook or channel). Below ``runtime``; above ``channels`` and ``assistant``.
"""
