"""What a capability package declares to the web layer (:class:`mewdex.capability.Capability`, hook
``capabilities``): its error codes' HTTP statuses, gathered by :func:`mewdex.web.errors.all_statuses`."""

from __future__ import annotations

from mewdex import hooks
from mewdex.web.errors import STATUS_BY_CODE, all_statuses, http_status


def test_every_code_is_declared_once_by_the_core_or_one_capability():
    declared = hooks.implementations("capabilities")
    assert {"assistant", "backups", "channels", "connectors", "schedules", "telegram"} <= set(declared)
    owner = dict.fromkeys(STATUS_BY_CODE, "core")
    for name, capability in declared.items():
        for code in capability.errors:
            assert code not in owner, f"{code} is declared by {owner.get(code)} and {name}"
            owner[code] = name
    assert all_statuses() == {**STATUS_BY_CODE, **{c: s for d in declared.values() for c, s in d.errors.items()}}


def test_a_capabilitys_codes_answer_with_its_statuses():
    assert {
        code: http_status(code) for code in ("schedule_limit_reached", "schedule_too_frequent", "cron_invalid")
    } == {
        "schedule_limit_reached": 409,
        "schedule_too_frequent": 422,
        "cron_invalid": 422,
    }
    assert http_status("conversation_not_deleted") == http_status("run_not_active") == 409
    assert http_status("connector_unverified") == http_status("connector_unavailable") == 409
    assert http_status("channel_platform_error") == 502 and http_status("sticker_set_not_found") == 404
    assert "schedule_limit_reached" not in STATUS_BY_CODE and "channel_platform_error" not in STATUS_BY_CODE
    assert http_status("no_such_code") == 422
