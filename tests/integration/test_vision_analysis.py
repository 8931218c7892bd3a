"""Vision-LLM analysis end to end (issue 15): 20 corpus memes through the fake vision model (answers
keyed by the sha256 of the image mewdex sends), a query only the model's description matches finds
its meme first, usage events and audits, a zero budget refuses before any call, and a refusal or
an endpoint without structured outputs."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import uuid
from decimal import Decimal

import pytest
from sqlalchemy import select, text

from conftest import CORPUS, corpus_available, drain_queue
from fakes.openai_server import FakeOpenAI, Reply

pytestmark = pytest.mark.corpus

FILES = [
    "drake/yes.jpg",
    "crow/default.jpg",
    "dragon/default.png",
    "cmm/default.png",
    "afraid/default.jpg",
    "agnes/default.jpg",
    "ams/default.jpg",
    "ants/default.jpg",
    "astronaut/default.png",
    "awesome/default.jpg",
    "bad/default.jpg",
    "balloon/default.jpg",
    "bender/default.jpg",
    "bilbo/default.jpg",
    "boat/default.jpg",
    "aag/default.jpg",
    "ackbar/default.jpg",
    "aint-got-time/default.jpg",
    "away/default.jpg",
    "because/default.png",
]


def _answer(n: int, description: str) -> dict:
    return {
        "title_zh": f"表情{n}",
        "title_en": f"reaction {n}",
        "description_zh": "一张图片",
        "description_en": description,
        "text_in_image": "",
        "people": [],
        "objects": ["thing"],
        "emotions": ["neutral"],
        "usage_scenarios": ["replying in a chat"],
        "tags_zh": ["表情"],
        "tags_en": ["meme"],
        "template": None,
        "safety": "safe",
    }


def _sent_sha(data: bytes) -> str:
    from mewdex.library.images import load_frames
    from mewdex.providers.vision import jpeg_data_urls

    url = jpeg_data_urls(load_frames(data, indices="first_middle"))[0]
    return hashlib.sha256(base64.b64decode(url.split(",", 1)[1])).hexdigest()


@pytest.fixture
def vision_world(sessions, store, settings_env, tmp_path):
    if not corpus_available():
        pytest.skip("corpus not found")
    paths = [CORPUS / "memegen" / "images" / rel for rel in FILES]
    paths = [p for p in paths if p.is_file()]
    if len(paths) < 20:
        pytest.skip("corpus files missing")
    from accounts_helpers import delete_users, own_scope_users
    from mewdex.db.models import ScopeContext
    from mewdex.providers import connectors, policy

    with FakeOpenAI() as fake:
        settings_env(MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([fake.host_port]), MEWDEX_PROVIDER_MAX_RETRIES="0")
        answers = {}
        root = tmp_path / "inbox"
        root.mkdir()
        for n, path in enumerate(paths):
            target = root / f"img_{n:03d}{path.suffix}"  # names that say nothing
            shutil.copyfile(path, target)
            description = (
                "a purple giraffe juggling paper lanterns on a rooftop"
                if n == 7
                else f"an ordinary reaction picture number {n}"
            )
            answers[_sent_sha(path.read_bytes())] = _answer(n, description)
        fake.handler = lambda request: Reply.json(answers[hashlib.sha256(FakeOpenAI.images(request)[0]).hexdigest()])
        with sessions.begin() as session:
            (user,), made = own_scope_users(session, ["vision"], role="user")
            user_id, scope = user.user_id, ScopeContext(user.scope_id)
            definition = connectors.create_definition(
                session,
                provider="openai_compatible",
                name=f"vision-{uuid.uuid4().hex[:6]}",
                visibility="all",
                credentials={"api_key": fake.api_key},
                config={
                    "base_url": fake.base_url,
                    "vision_model": "fake-vision",
                    "price_version": "v7",
                    "prices": {"fake-vision": {"input": 1, "output": 4, "image": "0.001"}},
                },
            )
            definition_id = definition.definition_id
            policy.update(session, scope, vision=True)
        yield {
            "fake": fake,
            "scope": scope,
            "user_id": user_id,
            "root": root,
            "definition_id": definition_id,
            "target": root / "img_007.jpg",
        }

        with sessions.begin() as session:
            session.execute(text("DELETE FROM external_system_audits WHERE definition_id = :d"), {"d": definition_id})
            session.execute(
                text("DELETE FROM external_system_definitions WHERE definition_id = :d"), {"d": definition_id}
            )
        delete_users(sessions, made)


def test_vision_analysis_feeds_search_meters_and_audits(vision_world, sessions, store):
    from mewdex.db.models import ExternalSystemAudit, Meme, UsageEvent, User
    from mewdex.library.importer import collect, import_paths
    from mewdex.pipeline import jobs
    from mewdex.search.service import search

    fake, scope = vision_world["fake"], vision_world["scope"]
    ids = {}
    import_paths(
        sessions,
        store,
        scope,
        collect([vision_world["root"]]),
        on_result=lambda item, result: ids.__setitem__(item.relative_path, result.meme_id),
    )
    drain_queue(sessions, scope, timeout=600)
    assert len(fake.chat_requests()) == 20
    request = fake.chat_requests()[0]
    assert request["model"] == "fake-vision" and request["response_format"]["type"] == "json_schema"
    assert all(
        max(__import__("PIL.Image", fromlist=["Image"]).open(__import__("io").BytesIO(img)).size) <= 768
        for img in FakeOpenAI.images(request)
    )
    target_id = str(
        ids[str(vision_world["target"].name)]
        if vision_world["target"].name in ids
        else next(v for k, v in ids.items() if str(k).endswith("img_007.jpg"))
    )
    with sessions.begin() as session:
        meme = session.execute(select(Meme).where(Meme.scope_id == scope.scope_id, Meme.id == target_id)).scalar_one()
        assert meme.meme_context["vision_status"] == "ok"
        assert meme.meme_context["vision"]["description_en"].startswith("a purple giraffe")
        hits = search(session, scope, "giraffe juggling lanterns").results
        assert hits and str(hits[0].id) == target_id
        hits = search(session, scope, "purple giraffe on a roof", legs=("e5", "use")).results
        assert hits and str(hits[0].id) == target_id  # the vector legs embed the vision field too
        from mewdex.search.evaluation import evaluate

        quality = evaluate(
            session,
            scope,
            [{"query": "giraffe juggling lanterns", "ids": [target_id]}, {"query": "anything", "sha256": ["0" * 64]}],
        )
        assert quality == {"queries": 2, "evaluated": 1, "skipped": 1, "recall_at_10": 1.0, "mrr_at_10": 1.0}
        events = (
            session.execute(
                select(UsageEvent).where(
                    UsageEvent.scope_id == scope.scope_id, UsageEvent.model_profile.like("vision-%")
                )
            )
            .scalars()
            .all()
        )
        assert len(events) == 20 and all(e.units["outcome"] == "ok" and e.units["images"] == 1 for e in events)
        assert all(e.units["price_version"] == "v7" and e.cost_cny >= Decimal("0.001") for e in events)
        audits = (
            session.execute(select(ExternalSystemAudit).where(ExternalSystemAudit.scope_id == scope.scope_id))
            .scalars()
            .all()
        )
        assert len(audits) == 20 and {(a.event, a.outcome, a.status_code) for a in audits} == {
            ("vision_analysis", "ok", 200)
        }
        assert fake.api_key not in json.dumps([a.detail for a in audits])

        # a budget of zero: the re-analysis is refused before any call, the meme keeps a local context
        session.get(User, vision_world["user_id"]).quota_analysis_cost_per_month = Decimal(0)
        jobs.create_job(session, meme, mode="full_retry")
    before = len(fake.chat_requests())
    drain_queue(sessions, scope, timeout=300)
    assert len(fake.chat_requests()) == before
    with sessions.begin() as session:
        meme = session.execute(select(Meme).where(Meme.scope_id == scope.scope_id, Meme.id == target_id)).scalar_one()
        assert meme.meme_context["vision_status"] == "quota_exceeded" and meme.context_status == "ready"
        refused = (
            session.execute(
                select(UsageEvent).where(
                    UsageEvent.scope_id == scope.scope_id, UsageEvent.units["outcome"].astext == "refused"
                )
            )
            .scalars()
            .all()
        )
        assert len(refused) == 1 and refused[0].cost_cny == 0
        assert (
            session.execute(
                select(ExternalSystemAudit).where(
                    ExternalSystemAudit.scope_id == scope.scope_id, ExternalSystemAudit.outcome == "refused"
                )
            )
            .scalars()
            .all()
        )


def test_fallback_to_json_mode_repair_and_refusal(vision_world, sessions, store):
    from mewdex.db.models import Meme
    from mewdex.library.importer import collect, import_paths

    fake, scope = vision_world["fake"], vision_world["scope"]
    good = _answer(1, "a cat wearing sunglasses")
    broken = dict(good)
    del broken["safety"]
    # no structured outputs (400) → JSON mode answers invalid → one repair → valid
    fake.script(
        Reply.error(400, "response_format json_schema is not supported"),
        Reply.json(broken),
        Reply.json(good),
        Reply.refusal("I can't describe this."),
    )
    one = vision_world["root"] / "one"
    one.mkdir()
    shutil.copyfile(CORPUS / "memegen" / "images" / FILES[0], one / "a.jpg")
    shutil.copyfile(CORPUS / "memegen" / "images" / FILES[1], one / "b.jpg")
    import_paths(sessions, store, scope, collect([one]))
    drain_queue(sessions, scope, timeout=300)
    bodies = fake.chat_requests()
    assert [b["response_format"]["type"] for b in bodies] == [
        "json_schema",
        "json_object",
        "json_object",
        "json_schema",
    ]
    with sessions.begin() as session:
        contexts = [
            m.meme_context for m in session.execute(select(Meme).where(Meme.scope_id == scope.scope_id)).scalars()
        ]
    statuses = sorted(c["vision_status"] for c in contexts)
    assert statuses == ["ok", "provider_refused"]
    assert (
        next(c for c in contexts if c["vision_status"] == "ok")["vision"]["description_en"]
        == "a cat wearing sunglasses"
    )


def test_worker_killed_during_the_call_leaves_unknown_execution_and_resume_completes(
    vision_world, sessions, store, mewdex_env
):
    import signal
    import threading
    import time

    from conftest import wait_until
    from mewdex.db.models import Meme, Task, UsageEvent
    from mewdex.library.importer import collect, import_paths
    from mewdex.queue import service
    from mewdex.queue import tasks as queue
    from queue_helpers import start_workers, stop_workers

    fake, scope = vision_world["fake"], vision_world["scope"]
    arrived, release = threading.Event(), threading.Event()
    answer = _answer(3, "a walrus reading a newspaper")

    def handler(request):
        if not arrived.is_set():
            arrived.set()
            release.wait(60)  # the worker dies while this call is in flight
        return Reply.json(answer)

    fake.handler = handler
    one = vision_world["root"] / "kill"
    one.mkdir()
    shutil.copyfile(CORPUS / "memegen" / "images" / FILES[4], one / "k.jpg")
    ids = []
    import_paths(sessions, store, scope, collect([one]), on_result=lambda item, result: ids.append(result.meme_id))
    workers = start_workers(
        mewdex_env,
        1,
        extra_env={
            "MEWDEX_EGRESS_ALLOW_HOSTS": json.dumps([fake.host_port]),
            "MEWDEX_PROVIDER_MAX_RETRIES": "0",
            "MEWDEX_WORKER_LEASE_SECONDS": "5",
            "MEWDEX_WORKER_HEARTBEAT_SECONDS": "1",
        },
    )
    try:
        assert arrived.wait(240), "the worker never called the vision model"
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait(30)
    finally:
        stop_workers(workers)
        release.set()

    def reaped():
        with sessions.begin() as session:
            queue.reap_expired(session)
            return session.execute(
                select(Task).where(
                    Task.scope_id == scope.scope_id,
                    Task.task_type == "meme_context_generation",
                    Task.termination_reason == "unknown_execution",
                )
            ).scalar_one_or_none()

    task = wait_until(reaped, timeout=60, what="the context task to end unknown_execution")
    assert task.status == "failed" and task.resume_available
    time.sleep(0.5)
    drain_queue(sessions, scope, timeout=60)  # never replayed by itself
    with sessions.begin() as session:
        assert len(fake.chat_requests()) == 1
        service.retry(session, scope, task.id)
    drain_queue(sessions, scope, timeout=300)
    assert len(fake.chat_requests()) == 2
    with sessions.begin() as session:
        meme = session.execute(select(Meme).where(Meme.scope_id == scope.scope_id, Meme.id == ids[0])).scalar_one()
        assert meme.meme_context["vision_status"] == "ok"
        assert meme.meme_context["vision"]["description_en"] == "a walrus reading a newspaper"
        ok = (
            session.execute(
                select(UsageEvent).where(
                    UsageEvent.scope_id == scope.scope_id, UsageEvent.units["outcome"].astext == "ok"
                )
            )
            .scalars()
            .all()
        )
        assert len(ok) == 1  # the resumed attempt commits the grant the dead one reserved, once


def test_the_nearest_memes_titles_go_into_the_vision_prompt(vision_world, sessions, store):
    """Issue 15, point 4: the titles of the memes that look most like the new one are hints in its
    prompt (a resized copy of an analysed meme gets that meme's title; an unrelated picture does not)."""
    import io

    from PIL import Image

    from mewdex.library.importer import collect, import_paths

    fake, scope = vision_world["fake"], vision_world["scope"]
    prompts = []

    def handler(request):
        prompts.append(FakeOpenAI.prompt_text(request))
        answer = _answer(len(prompts), "a picture")
        if len(prompts) == 1:
            answer.update(title_en="Admiral Ackbar warns of a trap", template="It's a Trap")
        return Reply.json(answer)

    fake.handler = handler
    source = CORPUS / "memegen" / "images" / "ackbar" / "default.jpg"
    first = vision_world["root"] / "first"
    first.mkdir()
    shutil.copyfile(source, first / "img_a.jpg")
    import_paths(sessions, store, scope, collect([first]))
    drain_queue(sessions, scope, timeout=300)
    assert len(prompts) == 1 and "visually similar" not in prompts[0]  # nothing to compare with yet

    second = vision_world["root"] / "second"
    second.mkdir()
    with Image.open(source) as image:  # the same picture, resized and re-encoded: other bytes
        copy = image.convert("RGB").resize((image.width * 3 // 4, image.height * 3 // 4))
        buffer = io.BytesIO()
        copy.save(buffer, "JPEG", quality=80)
    (second / "img_b.jpg").write_bytes(buffer.getvalue())
    shutil.copyfile(CORPUS / "memegen" / "images" / "balloon" / "default.jpg", second / "img_c.jpg")
    import_paths(sessions, store, scope, collect([second]))
    drain_queue(sessions, scope, timeout=300)
    assert len(prompts) == 3
    hinted = [p for p in prompts[1:] if "It's a Trap / Admiral Ackbar warns of a trap" in p]
    assert len(hinted) == 1, prompts[1:]
    assert "Titles of visually similar memes in this library (hints):" in hinted[0]


def test_each_analysis_closes_its_client_and_leaves_no_connection_open(vision_world, sessions, monkeypatch):
    """The SDK client an analysis makes is closed when it ends (a refusal too): repeated analyses
    hold no client and no socket to the model server."""
    import psutil
    from PIL import Image

    from mewdex.providers import openai_compat, vision
    from mewdex.providers.errors import ProviderError

    fake, scope = vision_world["fake"], vision_world["scope"]
    made = []
    real = openai_compat.sdk_client
    monkeypatch.setattr(openai_compat, "sdk_client", lambda *a, **kw: made.append(real(*a, **kw)) or made[-1])
    fake.script(Reply.json(_answer(1, "one")), Reply.refusal("no"), Reply.json(_answer(2, "two")))
    frames = [Image.new("RGB", (64, 48), "red")]
    outcomes = []
    for n in range(3):
        try:
            result = vision.analyze(sessions, scope, frames=frames, ocr_text="", file_name=f"{n}.png", folders=[])
            outcomes.append(result["description_en"])
        except ProviderError as exc:
            outcomes.append(exc.code)
    assert outcomes == ["one", "provider_refused", "two"]
    assert len(made) == 3 and all(client.is_closed() for client in made)
    port = int(fake.host_port.rsplit(":", 1)[1])
    open_to_fake = [
        c
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port and c.status == "ESTABLISHED"
    ]
    assert open_to_fake == []
