"""The visual stage against the real database and blob store: thumbnails, visual embedding, labels,
phash, near-duplicates (DUP-01), search by image / similar / duplicates / thumbnail endpoints,
thumbnail reconcile, and a broken model (ML-01)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from sqlalchemy import select, text

from conftest import client_for
from mewdex.db.models import DerivedImageThumbnail, Meme, MemeVisualEmbedding, Scope
from mewdex.inference import visual_model
from mewdex.library import thumbnails as th
from mewdex.library.memes import add_image
from mewdex.pipeline import stages, visual
from mewdex.pipeline.stages import MemeSnapshot, StageError
from mewdex.search import image_search, near_duplicates

SEARCH_HIT_KEYS = {"id", "display_name", "sha256", "score", "media_url", "snippet", "confidence", "why", "why_query"}

CASES = Path(__file__).resolve().parents[1] / "cases"


def png(color, size=(64, 48), noise_seed=None) -> bytes:
    if noise_seed is None:
        im = Image.new("RGB", size, color)
    else:
        rng = np.random.default_rng(noise_seed)
        im = Image.fromarray(rng.integers(0, 255, size=(6, 8, 3), dtype=np.uint8)).resize(
            size, Image.Resampling.BICUBIC
        )
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def add(sessions, store, scope, data: bytes, name: str) -> str:
    result = add_image(sessions, store, scope, data, filename=name, provenance={"relative_path": name}, process=False)
    assert result.status in ("created", "duplicate"), result
    return result.meme_id


def process(sessions, store, scope, meme_id, stage=None):
    """Run the visual stage like the worker does: snapshot → run (no transaction) → apply (transaction)."""
    stage = stage or visual.VisualStage()
    with sessions.begin() as session:
        meme = session.get(Meme, meme_id)
        namespace = str(session.get(Scope, scope.scope_id).storage_namespace)
        key = meme.storage_key
        snap = MemeSnapshot(
            meme.scope_id,
            meme.id,
            meme.sha256,
            meme.display_name,
            dict(meme.provenance),
            dict(meme.meme_context),
            lambda: store.path(namespace, key).read_bytes(),
        )
    output = stage.run(snap)
    with sessions.begin() as session:
        stage.apply(session, stages.load_meme(session, scope.scope_id, snap.id), output)
    return output


def test_stage_writes_thumbnails_embedding_labels_and_phash(sessions, store, scope):
    meme_id = add(sessions, store, scope, (CASES / "img06_animated_3frames.webp").read_bytes(), "anim.webp")
    out = process(sessions, store, scope, meme_id)
    with sessions.begin() as session:
        meme = session.get(Meme, meme_id)
        rows = {
            r.profile: r
            for r in session.execute(
                select(DerivedImageThumbnail).where(DerivedImageThumbnail.meme_id == meme.id)
            ).scalars()
        }
        assert set(rows) == {th.STILL_PROFILE, th.ANIMATED_PROFILE}
        namespace = str(session.get(Scope, scope.scope_id).storage_namespace)
        for row in rows.values():
            assert row.status == "available" and row.source_sha256 == meme.sha256
            assert row.output_key == f"{row.output_sha256}.webp"
            assert store.exists(th.thumbnail_namespace(namespace), row.output_key)
            assert not store.exists(namespace, row.output_key)  # originals' namespace holds originals only
            assert row.media_type == "image/webp"
        emb = session.execute(select(MemeVisualEmbedding).where(MemeVisualEmbedding.meme_id == meme.id)).scalar_one()
        assert emb.dimensions == 1280 and emb.model == visual.MODEL_ID
        assert emb.preprocess_version == visual.PREPROCESS_VERSION and emb.image_sha256 == meme.sha256
        assert abs(float(np.linalg.norm(np.asarray(emb.embedding))) - 1) < 1e-4
        assert meme.meme_context["labels"] == out.context_labels and meme.meme_context["labels"]
        assert meme.extensions["visual"]["phash"] == out.phash and len(meme.extensions["visual"]["labels"]) == 5
        assert meme.extensions["image"]["animated"] is True  # what the upload recorded is kept
        index = session.execute(
            text(
                "SELECT count(*) FROM pg_indexes WHERE tablename = 'meme_visual_embeddings' AND indexdef ILIKE '%hnsw%'"
            )
        ).scalar_one()
        assert index >= 1
    # re-running is idempotent: one embedding row, the same thumbnail rows
    process(sessions, store, scope, meme_id)
    with sessions.begin() as session:
        assert (
            session.execute(select(MemeVisualEmbedding).where(MemeVisualEmbedding.meme_id == meme_id))
            .scalars()
            .all()
            .__len__()
            == 1
        )


def test_dup01_same_pixels_different_bytes_is_a_near_duplicate_of_the_first(sessions, store, scope):
    dup = CASES / "dup01"
    first = add(sessions, store, scope, (dup / "same.png").read_bytes(), "same.png")
    again = add(sessions, store, scope, (dup / "same_renamed_copy.png").read_bytes(), "same_renamed_copy.png")
    assert again == first  # byte-identical: the same meme
    third = add(sessions, store, scope, (dup / "same_pixels_with_text_chunk.png").read_bytes(), "other.png")
    assert third != first
    unrelated = add(sessions, store, scope, png(None, noise_seed=3), "noise.png")
    for m in (first, third, unrelated):
        process(sessions, store, scope, m)
    with sessions.begin() as session:
        pairs = (
            session.execute(
                select(near_duplicates.near_duplicates).where(
                    near_duplicates.near_duplicates.c.scope_id == scope.scope_id
                )
            )
            .mappings()
            .all()
        )
        assert [(str(p["meme_id"]), str(p["duplicate_of"]), p["phash_distance"]) for p in pairs] == [(third, first, 0)]
        assert pairs[0]["cosine"] > 0.999
        shown = image_search.near_duplicates_of(session, scope.scope_id, third)
        assert [(d["id"], d["relation"]) for d in shown] == [(first, "duplicate_of")]
    api = client_for(scope)
    clusters = api.get("/api/v1/duplicates").json()
    assert clusters["total"] == 1
    assert clusters["clusters"][0]["original"] == first
    assert [m["id"] for m in clusters["clusters"][0]["memes"]] == [first, third]
    assert api.get(f"/api/v1/memes/{third}/duplicates").json()["near_duplicates"][0]["id"] == first


def test_search_by_image_and_similar(sessions, store, scope):
    ids = [add(sessions, store, scope, png(None, noise_seed=s, size=(160, 120)), f"n{s}.png") for s in range(6)]
    for m in ids:
        process(sessions, store, scope, m)
    # a re-encoded, resized copy of meme 2 finds meme 2 first
    im = Image.open(io.BytesIO(png(None, noise_seed=2, size=(160, 120)))).resize((80, 60))
    buf = io.BytesIO()
    im.convert("RGB").save(buf, "JPEG", quality=40)
    api = client_for(scope)
    r = api.post(
        "/api/v1/search/image", files={"file": ("q.jpg", buf.getvalue(), "image/jpeg")}, data={"n_results": "3"}
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"results", "took_ms"} and len(body["results"]) == 3
    top = body["results"][0]
    assert top["id"] == ids[2] and set(top) == SEARCH_HIT_KEYS
    assert top["score"] > 0.9 and top["media_url"] == f"/media/{ids[2]}"
    sim = api.get(f"/api/v1/memes/{ids[2]}/similar", params={"n_results": 10}).json()["results"]
    assert ids[2] not in [x["id"] for x in sim] and len(sim) == 5
    # bad input
    assert (
        api.post("/api/v1/search/image", files={"file": ("x.png", b"hello", "image/png")}).json()["error"]["code"]
        == "unsupported_media_type"
    )
    assert (
        api.post(
            "/api/v1/search/image", files={"file": ("x.png", png("red"), "image/png")}, data={"n_results": "0"}
        ).status_code
        == 422
    )
    assert api.get("/api/v1/memes/not-a-uuid/similar").status_code == 404


def test_search_by_image_stays_inside_the_scope(sessions, store, scope):
    from conftest import drop_scope, new_scope

    other = new_scope(sessions, "t-other")
    try:
        theirs = add(sessions, store, other, png(None, noise_seed=11), "theirs.png")
        process(sessions, store, other, theirs)
        mine = add(sessions, store, scope, png(None, noise_seed=12), "mine.png")
        process(sessions, store, scope, mine)
        with sessions.begin() as session:
            res = image_search.search_by_image(session, scope, png(None, noise_seed=11), 10)
        assert [str(r.id) for r in res.results] == [mine]
    finally:
        drop_scope(sessions, other)


def test_thumbnail_endpoint_and_reconcile(sessions, store, scope):
    still_id = add(sessions, store, scope, png("blue"), "blue.png")
    anim_id = add(sessions, store, scope, (CASES / "img06_animated_3frames.webp").read_bytes(), "anim.webp")
    api = client_for(scope)
    # before processing: the original stands in (thumbnails are rendered only by the worker)
    r = api.get(f"/media/{still_id}/thumbnail")
    assert (
        r.status_code == 200 and r.headers["content-type"] == "image/png" and r.headers["cache-control"] == "no-store"
    )
    assert r.content == png("blue")
    report = th.reconcile(sessions, store, scope.scope_id)
    assert report.as_dict() == {"checked": 2, "rebuilt": 2, "failed": 0}
    assert th.reconcile(sessions, store, scope.scope_id).rebuilt == 0
    r = api.get(f"/media/{anim_id}/thumbnail", params={"animated": 1})
    assert r.status_code == 200 and "immutable" in r.headers["cache-control"]
    assert getattr(Image.open(io.BytesIO(r.content)), "n_frames", 1) == 3
    assert api.get(f"/media/{anim_id}/thumbnail", headers={"if-none-match": r.headers["etag"]}).status_code in (
        200,
        304,
    )
    still = api.get(f"/media/{anim_id}/thumbnail")
    assert getattr(Image.open(io.BytesIO(still.content)), "n_frames", 1) == 1
    # a still meme asked for the animated preview falls back to its still
    fallback = api.get(f"/media/{still_id}/thumbnail", params={"animated": 1})
    assert fallback.status_code == 200 and "immutable" in fallback.headers["cache-control"]
    # a lost thumbnail blob is rebuilt by reconcile
    with sessions.begin() as session:
        row = session.execute(
            select(DerivedImageThumbnail).where(
                DerivedImageThumbnail.meme_id == still_id, DerivedImageThumbnail.profile == th.STILL_PROFILE
            )
        ).scalar_one()
        namespace = th.thumbnail_namespace(session.get(Scope, scope.scope_id).storage_namespace)
        key = row.output_key
    store.delete(namespace, key)
    assert th.reconcile(sessions, store, scope.scope_id).rebuilt == 1
    assert store.exists(namespace, key)
    assert api.get("/media/00000000-0000-0000-0000-000000000000/thumbnail").status_code == 404


def test_broken_model_fails_retryably_and_writes_nothing(sessions, store, scope, tmp_path):
    meme_id = add(sessions, store, scope, png("green"), "green.png")
    broken = visual.VisualStage(visual_model.VisualModel(tmp_path / "missing.onnx"))
    with pytest.raises(StageError) as err:
        process(sessions, store, scope, meme_id, stage=broken)
    assert err.value.code == "backend_unavailable" and err.value.retryable
    with sessions.begin() as session:
        assert (
            session.execute(select(MemeVisualEmbedding).where(MemeVisualEmbedding.meme_id == meme_id)).first() is None
        )


def test_full_pipeline_runs_visual_first(sessions, store, scope, drain, monkeypatch):
    """A job runs visual → agent → text_embedding; the image labels survive into the agent's context."""
    result = add_image(
        sessions,
        store,
        scope,
        png(None, noise_seed=21),
        filename="pipeline.png",
        provenance={"relative_path": "pipeline.png"},
    )
    drain(scope)
    with sessions.begin() as session:
        states = dict(
            session.execute(
                text("SELECT s.stage, s.status FROM image_processing_stages s WHERE s.scope_id = :s AND s.planned"),
                {"s": scope.scope_id},
            ).all()
        )
        assert states.get("visual") == "succeeded", states
        assert all(v == "succeeded" for v in states.values()), states
        meme = session.get(Meme, result.meme_id)
        assert meme.extensions["visual"]["phash"]
        assert (
            session.execute(select(MemeVisualEmbedding).where(MemeVisualEmbedding.meme_id == meme.id)).first()
            is not None
        )
        labels = meme.meme_context.get("labels")
    assert labels == [x for x in labels if isinstance(x, str)] and len(labels) >= 2
