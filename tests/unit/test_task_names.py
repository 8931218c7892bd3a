"""The tasks page names every task type and lane in both languages, and a lane that runs one kind of
pipeline work is named like that work (the "Image analysis" tasks queue in the "Image analysis" lane)."""

from __future__ import annotations

from mewdex.dto import i18n
from mewdex.pipeline.tasks import CONTEXT_LANE
from mewdex.queue import registry
from mewdex.queue.tasks import lane_names
from mewdex.runtime import load_plugins


def built_in_task_types() -> list[str]:
    """mewdex's own task types: those of the modules every process loads (tests register their own)."""
    return [n for n, t in registry.TASK_TYPES.items() if getattr(t.handler, "__module__", "").startswith("mewdex.")]


def test_every_task_type_and_listed_lane_has_a_name_in_both_languages():
    load_plugins()
    for locale in i18n.LOCALES:
        catalogue = i18n.catalogue(locale)
        missing = [f"task_type.{n}" for n in built_in_task_types() if f"task_type.{n}" not in catalogue]
        ours = {registry.TASK_TYPES[n].lane for n in built_in_task_types()}
        missing += [f"lane.{n}" for n in lane_names(listed_only=True) if n in ours and f"lane.{n}" not in catalogue]
        assert missing == [], locale


def test_pipeline_lanes_are_named_like_their_tasks():
    load_plugins()
    pipeline = {"visual": "visual_embedding_generation", CONTEXT_LANE: "meme_context_generation"}
    pipeline["embedding"] = "text_embedding_generation"
    for locale in i18n.LOCALES:
        for lane, task_type in pipeline.items():
            assert registry.TASK_TYPES[task_type].lane == lane
            assert i18n.translate(locale, f"lane.{lane}") == i18n.translate(locale, f"task_type.{task_type}"), (
                locale,
                lane,
            )
