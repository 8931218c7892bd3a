"""What a capability package declares to the web layer (:class:`mewdex.capability.Capability`, hook
``capabilities``): its error codes' HTTP statuses, gathered by :func:`mewdex.web.errors.all_statuses`,
and its pages' links in the header, rendered with the shell's by :func:`mewdex.web.templating.nav`."""

from __future__ import annotations

from mewdex import hooks
from mewdex.capability import Capability, NavEntry
from mewdex.web.errors import STATUS_BY_CODE, all_statuses, http_status
from mewdex.web.templating import nav


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


def test_the_header_lists_the_shells_links_and_each_capabilitys_in_order():
    assert [(e.path, e.label) for e in nav(admin=False)] == [
        ("/", "nav.search"),
        ("/library", "nav.library"),
        ("/upload", "nav.upload"),
        ("/collections", "nav.collections"),
        ("/tags", "nav.tags"),
        ("/chat", "nav.chat"),
        ("/schedules", "nav.schedules"),
        ("/tasks", "nav.tasks"),
        ("/settings/channels", "nav.channels"),
        ("/connectors", "nav.connectors"),
    ]
    declared = hooks.implementations("capabilities")
    assert [e.path for e in declared["assistant"].nav] == ["/chat"]
    assert [e.path for e in declared["schedules"].nav] == ["/schedules"]
    assert nav(admin=True) == nav(admin=False)  # no built-in link is for admins only


def test_a_link_for_admins_only_is_shown_to_admins_alone():
    entry = NavEntry(page="t-admin", path="/t-admin", label="nav.t_admin", order=85, admin_only=True)
    hooks.provide("capabilities", "t-admin", Capability(name="t-admin", nav=(entry,)))
    try:
        assert entry not in nav(admin=False)
        paths = [e.path for e in nav(admin=True)]
        assert paths.index("/t-admin") == paths.index("/tasks") + 1  # by its order, between tasks and channels
    finally:
        hooks.withdraw("capabilities", "t-admin")
    assert entry not in nav(admin=True)
