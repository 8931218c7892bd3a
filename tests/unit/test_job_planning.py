"""Stage planning of processing jobs per mode (pure function, no database)."""

from mewdex.pipeline.jobs import plan

ENABLED = ["visual", "agent", "text_embedding"]


def test_new_image_plans_every_enabled_stage():
    assert plan(ENABLED, set(), "normal") == {
        "visual": None,
        "agent": None,
        "auto_rename": "disabled",
        "text_embedding": None,
    }


def test_normal_runs_from_the_first_stage_that_is_not_current():
    # visual is current, agent is not: agent and every later stage run (their inputs change).
    assert plan(ENABLED, {"visual", "text_embedding"}, "normal") == {
        "visual": "already_ready",
        "agent": None,
        "auto_rename": "disabled",
        "text_embedding": None,
    }


def test_repair_runs_only_the_stages_that_are_not_current():
    assert plan(ENABLED, {"visual", "text_embedding"}, "repair") == {
        "visual": "already_ready",
        "agent": None,
        "auto_rename": "disabled",
        "text_embedding": "already_ready",
    }


def test_full_retry_runs_every_enabled_stage():
    assert plan(ENABLED, set(ENABLED), "full_retry") == {
        "visual": None,
        "agent": None,
        "auto_rename": "disabled",
        "text_embedding": None,
    }


def test_unknown_mode_is_rejected():
    import pytest

    with pytest.raises(ValueError):
        plan(ENABLED, set(), "sometimes")
