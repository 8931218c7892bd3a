"""Search generations (VEC-03): a model change builds a new generation in the background from the
current contexts while search keeps serving the active one; the head switches when it is complete.

The embedders here are small deterministic hashing embedders defined in this test and registered
through the real model registry (``inference.models.register_text_embedder``); everything else (the
stage, the queue task, the worker, search) is the real code. While the test models are configured,
the start-up check runs for the test's scope only (no app start-up here: it checks every scope).
"""

from __future__ import annotations

import hashlib
import logging
import re

import numpy as np
import pytest
from sqlalchemy import func, select

from conftest import client_for
from mewdex.db.models import Meme, MemeEmbedding, SearchGeneration
from mewdex.inference import models
from mewdex.library.memes import add_image
from mewdex.pipeline.context import build_meme_context
from mewdex.pipeline.stages import MemeSnapshot, TextEmbeddingStage, context_hash, write_keyword_document
from mewdex.search import generations, service
from package_helpers import png


class HashEmbedder:
    """Bag of hashed character bigrams/words → ``dimensions`` buckets, L2-normalised."""

    def __init__(self, dimensions: int, tag: str):
        self.dimensions = dimensions
        self.model = f"hash-{tag}-{dimensions}d@test-1"

    def _vector(self, text: str) -> np.ndarray:
        v = np.zeros(self.dimensions, dtype=np.float32)
        text = text.lower()
        tokens = re.findall(r"\w+", text) + [text[i : i + 2] for i in range(len(text) - 1)]
        for token in tokens:
            h = int.from_bytes(hashlib.sha256(token.encode()).digest()[:4], "little")
            v[h % self.dimensions] += 1.0
        n = np.linalg.norm(v)
        return v / n if n else v

    def embed_passages(self, texts):
        return np.stack([self._vector(t) for t in texts]) if texts else np.zeros((0, self.dimensions), np.float32)

    def embed_query(self, text):
        return self._vector(text)


NAMES = ["grumpy cat", "drake yes", "狗头 保命", "surprised pikachu", "this is fine"]


@pytest.fixture
def hash_models(settings_env):
    for name, dims in [("hash16", 16), ("hash24", 24), ("hash16u", 16)]:
        models.register_text_embedder(name, lambda d=dims, n=name: HashEmbedder(d, n))
    settings_env(MEWDEX_TEXT_MODELS='{"e5": "hash16", "use": "hash16u"}')
    return settings_env


def _add_with_context(sessions, store, scope, i: int, name: str):
    """A meme with a real context (as the agent stage builds it) and its text vectors (real stage)."""
    result = add_image(
        sessions,
        store,
        scope,
        png((i * 40, 7, 7)),
        filename=f"{name}.png",
        provenance={"source": "test"},
        process=False,
    )
    context = build_meme_context(
        relative_path=f"{name}.png", display_name=name, ocr_lines=[], labels=None, image_size=(8, 8)
    )
    with sessions.begin() as session:
        meme = session.execute(
            select(Meme).where(Meme.scope_id == scope.scope_id, Meme.id == result.meme_id)
        ).scalar_one()
        meme.meme_context, meme.context_status = context, "ready"
        meme.search_metadata_hash = context_hash(context)
        write_keyword_document(session, meme)
        snapshot = MemeSnapshot(scope.scope_id, meme.id, meme.sha256, meme.display_name, {}, context, lambda: b"")
    stage = TextEmbeddingStage()
    output = stage.run(snapshot)
    with sessions.begin() as session:
        meme = session.execute(
            select(Meme).where(Meme.scope_id == scope.scope_id, Meme.id == result.meme_id)
        ).scalar_one()
        stage.apply(session, meme, output)
    return result.meme_id


def _top(sessions, scope, query: str, legs=("e5",)):
    with sessions.begin() as session:
        response = service.search(session, scope, query, 3, legs=legs)
    return [str(r.id) for r in response.results], response.degraded


def test_vec03_dimension_change_rebuilds_in_the_background(hash_models, sessions, store, scope, drain, caplog):
    ids = [_add_with_context(sessions, store, scope, i, n) for i, n in enumerate(NAMES[:4])]
    with sessions.begin() as session:
        old = generations.current_generation(session, scope.scope_id, "e5")
        assert (old.model, old.dimensions, old.status) == ("hash-hash16-16d@test-1", 16, "active")
    assert _top(sessions, scope, "grumpy cat")[0][0] == ids[0]

    hash_models(MEWDEX_TEXT_MODELS='{"e5": "hash24", "use": "hash16u"}')  # e5 leg: 16-d → 24-d
    with caplog.at_level(logging.WARNING, logger="mewdex.search.generations"):
        messages = generations.check_text_models(sessions, [scope.scope_id])
    ours = [m for m in messages if scope.scope_id in m]
    assert len(ours) == 1 and "dimension changed" in ours[0] and "(16-d)" in ours[0] and "(24-d)" in ours[0]
    assert "building generation" in ours[0] and ours[0] in caplog.text
    again = [m for m in generations.check_text_models(sessions, [scope.scope_id]) if scope.scope_id in m]
    assert again == ours  # a second start-up joins the same build

    with sessions.begin() as session:
        state = generations.status(session, scope.scope_id)
        e5 = state["legs"]["e5"]
        assert e5["active"]["model"] == old.model and e5["active"]["memes"] == 4
        assert e5["building"]["dimensions"] == 24 and e5["building"]["memes_done"] == 0
        assert e5["building"]["memes_total"] == 4 and e5["building"]["task"]["status"] == "queued"
        assert e5["in_sync"] is False and state["legs"]["use"]["in_sync"] is True
        # search keeps serving the old generation (old model still registered), keyword too; never a 500
        top, degraded = _top(sessions, scope, "grumpy cat")
        assert top[0] == ids[0] and degraded == []
        assert _top(sessions, scope, "drake yes", legs=("keyword",))[0][0] == ids[1]

    # a meme processed during the build goes into the new generation (not the 16-d one)
    late = _add_with_context(sessions, store, scope, 4, NAMES[4])
    with sessions.begin() as session:
        per_gen = dict(
            session.execute(
                select(MemeEmbedding.generation_id, func.count(func.distinct(MemeEmbedding.meme_id)))
                .where(MemeEmbedding.scope_id == scope.scope_id, MemeEmbedding.model.like("hash-hash%"))
                .group_by(MemeEmbedding.generation_id)
            ).all()
        )
        building = generations.building_generation(session, scope.scope_id, "hash-hash24-24d@test-1")
    assert per_gen[old.id] == 4 and per_gen[building.id] == 1

    drain(scope)
    with sessions.begin() as session:
        new = generations.current_generation(session, scope.scope_id, "e5")
        assert (new.id, new.dimensions, new.status) == (building.id, 24, "active")
        assert session.get(SearchGeneration, old.id).status == "retired"
        assert (
            session.execute(
                select(func.count()).select_from(MemeEmbedding).where(MemeEmbedding.generation_id == old.id)
            ).scalar_one()
            == 0
        )
        assert generations.progress(session, new) == (5, 5)
    with sessions.begin() as session:
        e5 = generations.status(session, scope.scope_id)["legs"]["e5"]
        assert e5["in_sync"] is True and e5["building"] is None and e5["active"]["memes"] == 5
    assert _top(sessions, scope, "this is fine")[0][0] == late
    assert _top(sessions, scope, "surprised pikachu")[0][0] == ids[3]


def test_reindex_without_the_old_model_keeps_keyword_search(hash_models, sessions, store, scope, drain):
    ids = [_add_with_context(sessions, store, scope, i, n) for i, n in enumerate(NAMES[:2])]
    models.register_text_embedder("hash16", lambda: HashEmbedder(16, "renamed"))  # the old model id is gone
    messages = [m for m in generations.check_text_models(sessions, [scope.scope_id]) if scope.scope_id in m]
    assert len(messages) == 1 and "model changed" in messages[0] and "not available" in messages[0]
    top, degraded = _top(sessions, scope, "drake yes", legs=("keyword", "e5"))
    assert degraded == ["e5"] and top[0] == ids[1]
    drain(scope)
    assert _top(sessions, scope, "drake yes") == ([ids[1], ids[0]], [])

    with sessions.begin() as session:  # mewdex reindex: a fresh build with the same model
        built = generations.start_reindex(session, scope.scope_id, model="e5")
        with pytest.raises(ValueError):
            generations.start_reindex(session, scope.scope_id, model="nope")
    assert [g.status for g in built] == ["building"]
    drain(scope)
    with sessions.begin() as session:
        assert generations.current_generation(session, scope.scope_id, "e5").id == built[0].id


def test_status_api_shape(scope):
    with client_for(scope) as api:
        state = api.get("/api/v1/search/status").json()
    assert state["memes"] == 0 and state["memes_with_context"] == 0
    assert set(state["legs"]) == {"e5", "use"}
    for entry in state["legs"].values():
        assert entry["active"] is None and entry["building"] is None and entry["in_sync"] is False
        assert entry["configured"]["dimensions"] in (384, 512)


def test_cli_reindex_starts_a_build_that_the_queue_completes(mewdex_env, sessions, scope, drain):
    proc = mewdex_env.cli("reindex", "--model", "use", "--scope", scope.scope_id, check=True)
    assert "building generation" in proc.stdout and proc.stdout.count("building generation") == 1
    assert mewdex_env.cli("reindex", "--model", "nope", "--scope", scope.scope_id).returncode == 2
    with sessions.begin() as session:
        assert generations.status(session, scope.scope_id)["legs"]["use"]["building"]["task"]["status"] == "queued"
    drain(scope)
    with sessions.begin() as session:
        use = generations.status(session, scope.scope_id)["legs"]["use"]
    assert use["in_sync"] is True and use["active"]["memes"] == 0


def test_a_cancelled_reindex_fails_its_generation_and_search_keeps_the_active_one(
    hash_models, sessions, store, scope, drain
):
    from mewdex.db.models import Task
    from mewdex.queue import service as queue_service

    ids = [_add_with_context(sessions, store, scope, i, n) for i, n in enumerate(NAMES[:2])]
    drain(scope)
    with sessions.begin() as session:
        active = generations.current_generation(session, scope.scope_id, "e5").id
        [building] = generations.start_reindex(session, scope.scope_id, model="e5")
        task_id = session.execute(
            select(Task.id).where(
                Task.scope_id == scope.scope_id,
                Task.task_type == generations.REINDEX_TASK_TYPE,
                Task.status == "queued",
            )
        ).scalar_one()
        queue_service.cancel(session, scope, task_id)
    with sessions.begin() as session:
        assert session.get(SearchGeneration, building.id).status == "failed"
        assert generations.current_generation(session, scope.scope_id, "e5").id == active
    assert _top(sessions, scope, "drake yes")[0][0] == ids[1]


def test_a_search_embeds_its_query_once_per_vector_leg_before_the_legs_start(
    hash_models, sessions, store, scope, monkeypatch
):
    """The query is embedded first (the legs then find it in the query cache): once per vector leg's
    model, every embedding before any leg starts, and the fused answer is the same as the legs'."""
    _add_with_context(sessions, store, scope, 1, "grumpy cat")
    _add_with_context(sessions, store, scope, 2, "surprised pikachu")
    events: list[tuple[str, str]] = []
    for name in ("hash16", "hash16u"):
        embedder = models.text_embedder(name)
        real = embedder.embed_query
        monkeypatch.setattr(
            embedder, "embed_query", lambda q, real=real, m=embedder.model: events.append(("embed", m)) or real(q)
        )
    run_leg = service._run_leg
    monkeypatch.setattr(service, "_run_leg", lambda leg, *a: events.append(("leg", leg)) or run_leg(leg, *a))
    service._query_cache.clear()

    ids, degraded = _top(sessions, scope, "grumpy cat", legs=("keyword", "e5", "use"))

    assert degraded == [] and len(ids) == 2
    embeds = [e for e in events if e[0] == "embed"]
    assert sorted(embeds) == [("embed", "hash-hash16-16d@test-1"), ("embed", "hash-hash16u-16d@test-1")]
    assert events[: len(embeds)] == embeds  # every embedding before the first leg
    assert sorted(leg for kind, leg in events if kind == "leg") == ["e5", "keyword", "use"]


def test_write_targets_reads_every_legs_generations_in_one_statement(hash_models, sessions, store, scope):
    """The text-embedding write-back's lookup: each leg's active generation and the one being built
    for its model, for both legs at once (it used to take two statements per leg)."""
    from sqlalchemy import event

    _add_with_context(sessions, store, scope, 0, NAMES[0])  # both legs have an active generation
    use_model, new_e5 = "hash-hash16u-16d@test-1", "hash-hash24-24d@test-1"
    with sessions.begin() as session:
        building = generations.start_build(session, scope.scope_id, "e5", new_e5, 24, reason="model_changed")
    statements: list[str] = []

    def count(_conn, _cursor, statement, *_args) -> None:
        statements.append(statement)

    engine = sessions.kw["bind"]
    event.listen(engine, "before_cursor_execute", count)
    try:
        with sessions.begin() as session:
            targets = generations.write_targets(session, scope.scope_id, {"e5": (new_e5, 24), "use": (use_model, 16)})
            wanted = {leg: [(g.id, g.model) for g in gens] for leg, gens in targets.items()}
    finally:
        event.remove(engine, "before_cursor_execute", count)
    # e5's active generation uses the old model: only the build gets the new vectors
    assert wanted["e5"] == [(building.id, new_e5)]
    assert [model for _, model in wanted["use"]] == [use_model]
    assert len(statements) == 1
