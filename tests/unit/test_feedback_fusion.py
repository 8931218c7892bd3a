"""The feedback leg's scoring and its fusion with the other legs (pure functions; issue 33)."""

from __future__ import annotations

import uuid

from mewdex.search import feedback
from mewdex.search.service import fuse_feedback

A, B, C, D = (uuid.uuid4() for _ in range(4))
DAY = 86400.0


def test_score_weighs_similarity_kind_count_and_recency_and_keeps_rejections_apart():
    rows = [
        (A, "mark", "打工人下班累瘫了", 0.0, 1.0, True),
        (A, "mark", "打工人下班累瘫了", 0.0, 1.0, True),  # twice counts more than once
        (B, "download", "tired worker", 0.0, 0.95, False),
        (C, "rejected", "打工人下班累瘫了", 0.0, 1.0, True),
        (D, "mark", "unrelated", 0.0, feedback.MIN_SIMILARITY["use"] - 0.01, False),  # below the threshold
    ]
    result = feedback.score(rows, feedback.MIN_SIMILARITY["use"])
    assert result.net[A] == 2.0 and result.exact == {A, C}
    assert 0 < result.net[B] < feedback.KIND_WEIGHTS["download"]  # a neighbour counts less than the same query
    assert C not in result.net and result.rejected == {C: 1.0} and D not in result.net
    assert result.why == {A: "打工人下班累瘫了", B: "tired worker"}
    old = feedback.score([(A, "mark", "q", feedback.HALF_LIFE_DAYS * DAY, 1.0, True)], 0.5)
    assert abs(old.net[A] - 0.5) < 1e-9  # one half-life: half the weight
    # A rejection fades within days ("not this one now"), a choice over months.
    stale = feedback.score([(C, "rejected", "q", feedback.REJECT_HALF_LIFE_DAYS * DAY, 1.0, True)], 0.5)
    assert abs(stale.rejected[C] - 0.5) < 1e-9 and feedback.REJECT_HALF_LIFE_DAYS < feedback.HALF_LIFE_DAYS / 10
    assert feedback.KIND_WEIGHTS["mark"] == feedback.KIND_WEIGHTS["send"] > feedback.KIND_WEIGHTS["download"] > 0
    assert feedback.lift(10.0) <= feedback.LIFT and feedback.lift(2.0) > feedback.lift(1.0)


def test_fusion_lifts_and_never_overtakes_a_strong_lexical_match():
    base = {A: 0.55, B: 0.30, C: 0.25}  # A: the exact-caption match
    fb = feedback.LegResult(net={B: 1.0, D: 2.0}, closest={B: 0.9, D: 0.9}, reworded_at=0.5)
    scores = fuse_feedback(base, fb, phrase=set(), keyword_hits={A})
    assert scores[B] > base[B] and scores[D] > 0  # lifted, and D (no other leg found it) joins
    # One lifted meme at most (the best) passes the strong match, which stays second at worst.
    assert sorted(scores, key=lambda m: -scores[m])[:3] == [D, A, B]
    # A lift from a different request (not this one reworded) never passes it.
    fb.closest = {B: 0.3, D: 0.3}
    scores = fuse_feedback(base, fb, phrase=set(), keyword_hits={A})
    top = sorted(scores, key=lambda m: -scores[m])[:3]
    assert top[0] == A and set(top[1:]) == {B, D}
    # Feedback for this very query may go above it: the person said so.
    exact = feedback.LegResult(net={B: 2.0}, exact={B})
    scores = fuse_feedback(base, exact, phrase=set(), keyword_hits={A})
    assert scores[B] > scores[A]
    # Without a strong lexical match a neighbour's lift is not capped; no feedback changes nothing.
    scores = fuse_feedback({A: 0.2, B: 0.1}, feedback.LegResult(net={B: 1.0}), phrase=set(), keyword_hits=set())
    assert scores[B] > scores[A]
    assert fuse_feedback(base, feedback.LegResult(), set(), set()) == base
    assert fuse_feedback(base, None, set(), set()) == base


def test_rejections_remove_nothing_and_push_down_weakly_only_in_the_assistant():
    base = {A: 0.55, B: 0.30, C: 0.25}  # A: the exact-caption match
    rejected = feedback.LegResult(rejected={A: 3.0, B: 3.0, C: 0.2}, exact={A, B, C})
    # The search page, the API and MCP: rejections change nothing at all.
    assert fuse_feedback(base, rejected, phrase={A}, keyword_hits={A}) == base
    # The assistant's chat: a bounded push down, saturating with the count, never on a strong match.
    scores = fuse_feedback(base, rejected, phrase={A}, keyword_hits={A}, penalise_rejected=True)
    assert set(scores) == set(base) and scores[A] == base[A]
    assert base[B] - feedback.REJECT_PENALTY <= scores[B] < base[B]
    assert base[B] - scores[B] > base[C] - scores[C] > 0
    scores = fuse_feedback(base, rejected, phrase=set(), keyword_hits={A}, penalise_rejected=True)
    assert scores[A] == base[A]  # a strong keyword hit (fused ≥ HIGH_MIN_SCORE) keeps its score
    assert feedback.penalty(100.0) <= feedback.REJECT_PENALTY and feedback.penalty(0.0) == 0.0


def test_the_account_page_partial_renders_in_both_languages():
    from functools import partial

    from mewdex.dto import i18n
    from mewdex.web.templating import templates

    template = templates.env.get_template("partials/feedback_section.html")
    summary = {"learning_enabled": False, "events": 3, "queries": 2, "by_kind": dict.fromkeys(feedback.KINDS, 0)}
    summary["by_kind"] |= {"mark": 2, "rejected": 1}
    for lang, words in (
        ("en", ("Learn from my choices", "marked ✓: 2", "skipped: 1")),
        ("zh", ("从我的选择中学习", "跳过: 1")),
    ):
        html = template.render({"_": partial(i18n.translate, lang), "feedback": summary})
        assert all(w in html for w in words) and "feedback.kind" not in html
        assert 'data-action="feedback-learning">' in html  # unchecked: learning is off
        assert 'href="/api/v1/feedback/export"' in html and 'data-action="feedback-clear"' in html
    empty = template.render({"_": partial(i18n.translate, "en"), "feedback": {**summary, "events": 0}})
    assert "Nothing learned yet." in empty and "disabled" in empty
