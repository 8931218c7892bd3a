"""Assistant with a chat model (issue 16): the tool-calling loop against the fake OpenAI-compatible
server (real HTTP, the official SDK, streamed Chat Completions), cancel, the step cap, the budget,
the fallback to retrieval-only, chat usage events, the context summary and the LLM auto-title with
its ABA guard."""

from __future__ import annotations

import json
import threading
import uuid
from collections import deque
from decimal import Decimal

import pytest
from sqlalchemy import select, text

from conftest import client_for, wait_until
from fakes.openai_server import FakeOpenAI, Reply
from mewdex.assistant import agent, catalogue, chat, conversations, prompts, runs, titles
from mewdex.assistant.errors import AssistantError
from mewdex.db.models import Conversation, Message, ScopeContext, UsageEvent
from test_assistant import _conversation, _meme, add_library


@pytest.fixture
def library(sessions, scope):
    """The memes of test_assistant's library in the test's scope."""
    return add_library(sessions, scope)


@pytest.fixture
def fake(settings_env):
    with FakeOpenAI() as server:
        settings_env(
            MEWDEX_EGRESS_ALLOW_HOSTS=json.dumps([server.host_port]),
            MEWDEX_PROVIDER_MAX_RETRIES="0",
            MEWDEX_PROVIDER_TIMEOUT_SECONDS="10",
        )
        yield server


class Model:
    """The fake's chat requests routed by their system prompt: titles (``title``; ``title_gate``
    holds the answer back until set), summaries (``summary``), and the reply's steps (``steps``,
    then ``Reply.text("ok")``)."""

    def __init__(self, fake: FakeOpenAI):
        self.fake = fake
        self.steps: deque[Reply] = deque()
        self.title = "Cat memes"
        self.title_gate: threading.Event | None = None
        self.title_asked = threading.Event()
        self.summary = "The user wanted cat memes."
        fake.handler = self

    @staticmethod
    def kind(body: dict) -> str:
        system = (body.get("messages") or [{}])[0].get("content") or ""
        if system == prompts.SYSTEM_PROMPT:
            return "reply"
        if system == prompts.SUMMARY_PROMPT:
            return "summary"
        return "title" if system.startswith(prompts.TITLE_PROMPT[:30]) else "other"

    def __call__(self, body: dict) -> Reply:
        kind = self.kind(body)
        if kind == "title":
            self.title_asked.set()
            if self.title_gate is not None:
                self.title_gate.wait(20)
            return Reply.text(self.title)
        if kind == "summary":
            return Reply.text(self.summary)
        return self.steps.popleft() if self.steps else Reply.text("ok")

    def requests(self, kind: str = "reply") -> list[dict]:
        return [b for b in self.fake.chat_requests() if self.kind(b) == kind]


@pytest.fixture
def model(fake, sessions):
    """A platform ``openai_compatible`` connector with a chat model (visible to every scope; removed after)."""
    from mewdex.providers import connectors

    with sessions.begin() as session:
        definition = connectors.create_definition(
            session,
            provider="openai_compatible",
            name=f"chat-{uuid.uuid4().hex[:6]}",
            visibility="all",
            credentials={"api_key": fake.api_key},
            config={
                "base_url": fake.base_url,
                "chat_model": "fake-chat",
                "prices": {"fake-chat": {"input": 2, "output": 8}},
            },
        )
        definition_id = definition.definition_id
    yield Model(fake)
    with sessions.begin() as session:
        session.execute(text("DELETE FROM external_system_audits WHERE definition_id = :d"), {"d": definition_id})
        session.execute(text("DELETE FROM external_system_definitions WHERE definition_id = :d"), {"d": definition_id})


def _sse(body: str) -> list[tuple[str, dict]]:
    events = []
    for block in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def _events(sessions, scope, cid, content, image=None) -> list[tuple[str, dict]]:
    run = chat.begin(sessions, scope, cid, content, image)
    return list(chat.stream(sessions, run))


def test_the_model_searches_shows_memes_and_streams_with_usage_metered(sessions, scope, library, model):
    cats = library["cats"]
    model.steps.extend(
        [
            Reply.tool_call("search_memes", {"query": "cat", "n": 5}),
            Reply.calls([("show_memes", {"meme_ids": [cats[0], cats[1]]})], content="Two cats for you."),
            Reply.text(
                " They both look unimpressed, which fits.", usage={"prompt_tokens": 900, "completion_tokens": 40}
            ),
        ]
    )
    cid = _conversation(sessions, scope)
    with client_for(scope) as c:
        r = c.post(
            f"/api/v1/conversations/{cid}/messages",
            json={"content": "send me a cat meme"},
            headers={"Accept": "text/event-stream"},
        )
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = _sse(r.text)
        # The title comes from a call of its own, in parallel (usually before "done").
        wait_until(lambda: c.get(f"/api/v1/conversations/{cid}").json()["name"] == "Cat memes", what="the title")
        usage = c.get("/api/v1/usage", params={"group_by": "kind"}).json()
        conversation = c.get(f"/api/v1/conversations/{cid}").json()
    names = [n for n, _ in events]
    assert names[0] == "message" and names[-1] == "done" and "error" not in names
    assert names.count("delta") >= 3  # streamed in pieces, not in one block
    text_sent = "".join(d["text"] for n, d in events if n == "delta")
    assert text_sent == "Two cats for you. They both look unimpressed, which fits."
    assert [d["meme_id"] for n, d in events if n == "meme"] == [cats[0], cats[1]]
    done = events[-1][1]
    assert done["run_status"] == "idle"
    reply = done["message"]
    assert reply["content"] == text_sent and [m["meme_id"] for m in reply["memes"]] == [cats[0], cats[1]]
    assert all(m["artifact_id"] for m in reply["memes"])
    assert reply["model_profile"].endswith("/fake-chat") and reply["tokens_in"] >= 900 and reply["tokens_out"] >= 40

    # What the model got: the tools (the new create_collection among them), streaming with usage,
    # and the search's results as the tool's answer.
    steps = model.requests()
    assert len(steps) == 3 and all(s["stream"] and s["stream_options"] == {"include_usage": True} for s in steps)
    offered = {t["function"]["name"] for t in steps[0]["tools"]}
    assert offered == {t.name for t in catalogue.offered("agent")} - {"search_by_image"}
    found = json.loads(next(iter(FakeOpenAI.tool_results(steps[1]).values())))
    assert [h["id"] for h in found][:2] == cats[:2] and "media_url" not in found[0]
    shown = json.loads(list(FakeOpenAI.tool_results(steps[2]).values())[-1])
    assert shown == {"shown": [cats[0], cats[1]]}

    # Every model call is a chat usage event of this conversation, priced; the usage API shows them.
    with sessions.begin() as session:
        events_rows = (
            session.execute(select(UsageEvent).where(UsageEvent.scope_id == scope.scope_id, UsageEvent.kind == "chat"))
            .scalars()
            .all()
        )
        purposes = sorted(e.units["purpose"] for e in events_rows)
        assert purposes == ["reply", "reply", "reply", "title"]
        assert {e.units["conversation_id"] for e in events_rows} == {cid}
        assert all(e.units["outcome"] == "ok" and e.model_profile.endswith("/fake-chat") for e in events_rows)
        total = sum(e.cost_cny for e in events_rows)
        assert total > 0
    chat_group = next(g for g in usage["groups"] if g["key"] == "chat")
    assert chat_group["events"] == 4 and chat_group["cost"] == pytest.approx(float(total))
    assert conversation["cost_cny"] == pytest.approx(float(total))
    title_cost = next(e.cost_cny for e in events_rows if e.units["purpose"] == "title")
    assert reply["cost_cny"] == pytest.approx(float(total - title_cost))
    assert conversation["tokens_prompt"] >= 900 and conversation["name"] == "Cat memes"


def test_another_one_sends_the_shown_memes_in_the_context(sessions, scope, library, model):
    cats = library["cats"]
    cid = _conversation(sessions, scope, name="manual")
    model.steps.extend([Reply.tool_call("show_memes", {"meme_ids": [cats[0]]}), Reply.text("A cat.")])
    _events(sessions, scope, cid, "a cat please")
    model.steps.extend(
        [
            Reply.tool_call("show_memes", {"meme_ids": [cats[3]]}),
            Reply.tool_call("show_memes", {"meme_ids": [cats[3], cats[4]]}),  # a repeat within one reply
            Reply.text("Another."),
        ]
    )
    events = _events(sessions, scope, cid, "another one")
    assert [d["meme_id"] for n, d in events if n == "meme"] == [cats[3], cats[4]]
    first_step = model.requests()[-3]
    history = FakeOpenAI.prompt_text(first_step)
    assert "[memes shown: " + cats[0] + " \u201ccat 0\u201d]" in history and "another one" in history
    answer = json.loads(list(FakeOpenAI.tool_results(model.requests()[-1]).values())[-1])
    assert answer == {"shown": [cats[4]], "already_shown": [cats[3]]}
    with sessions.begin() as session:
        assert session.get(Conversation, uuid.UUID(cid)).name == "manual"  # a manual title is never replaced
    assert model.requests("title") == []


def test_tools_only_reach_the_callers_memes(sessions, scope, library, model):
    from conftest import drop_scope, new_scope

    other = new_scope(sessions)
    try:
        with sessions.begin() as session:
            theirs = _meme(other, "their cat")
            session.add(theirs)
            session.flush()
            their_id = str(theirs.id)
        cid = _conversation(sessions, scope, name="x")
        model.steps.extend(
            [
                Reply.calls(
                    [
                        ("get_meme", {"meme_id": their_id}),
                        ("show_memes", {"meme_ids": [their_id, library["slack"]]}),
                        ("add_to_collection", {"collection": "mine", "meme_ids": [their_id]}),
                        ("create_collection", {"name": "faves"}),
                        ("no_such_tool", {}),
                        ("search_memes", "{not json"),
                        ("search_memes", {"query": "cat", "n": 99}),  # over the catalogue's bound
                        ("show_memes", {"meme_ids": []}),
                    ]
                ),
                Reply.text("done"),
            ]
        )
        events = _events(sessions, scope, cid, "show me")
        assert [d["meme_id"] for n, d in events if n == "meme"] == [library["slack"]]
        results = list(FakeOpenAI.tool_results(model.requests()[-1]).values())
        answers = [json.loads(r) for r in results]
        assert answers[0]["error"]["code"] == "not_found"
        assert answers[1] == {"shown": [library["slack"]], "not_found": [their_id]}
        assert answers[2]["error"]["code"] == "not_found"
        assert answers[3]["name"] == "faves"
        assert answers[4]["error"]["code"] == "invalid_request" and answers[5]["error"]["code"] == "invalid_request"
        # Arguments the tool's model refuses go back to the model as the tool's error, naming the field.
        assert answers[6]["error"]["code"] == "invalid_request" and "n:" in answers[6]["error"]["message"]
        assert answers[7]["error"]["code"] == "invalid_request" and "meme_ids" in answers[7]["error"]["message"]
        from mewdex.assistant import tools

        assert [c["name"] for c in tools.list_collections(sessions, scope)] == ["faves", "摸鱼合集"]
        assert tools.list_collections(sessions, other) == []
    finally:
        drop_scope(sessions, other)


def test_stop_mid_stream_keeps_what_was_sent_and_ends_cancelled(sessions, scope, library, model):
    long_text = "This is a long answer that streams slowly, piece by piece, until someone stops it. " * 4
    model.steps.append(Reply.text(long_text, chunk_delay=0.05, chunk_chars=4))
    cid = _conversation(sessions, scope, name="x")
    run = chat.begin(sessions, scope, cid, "tell me a story")
    events, deltas = [], 0
    for name, data in chat.stream(sessions, run):
        events.append((name, data))
        if name == "delta":
            deltas += 1
            if deltas == 3:
                with sessions.begin() as session:
                    runs.cancel(session, scope, cid)
    done = events[-1][1]
    assert done["run_status"] == "cancelled"
    sent = "".join(d["text"] for n, d in events if n == "delta")
    assert 0 < len(sent) < len(long_text) and done["message"]["content"] == sent
    with sessions.begin() as session:
        conversation = session.get(Conversation, uuid.UUID(cid))
        assert conversation.run_status == "cancelled"
        row = session.execute(
            select(UsageEvent).where(UsageEvent.scope_id == scope.scope_id, UsageEvent.kind == "chat")
        ).scalar_one()
        assert row.units["estimated"] is True and row.units["output_tokens"] > 0  # cut before the usage chunk


def test_the_step_cap_ends_the_loop_and_the_last_step_may_not_call_tools(sessions, scope, library, model, settings_env):
    settings_env(MEWDEX_ASSISTANT_MAX_STEPS="3")
    model.steps.extend(Reply.tool_call("search_memes", {"query": f"cat {i}"}) for i in range(5))
    cid = _conversation(sessions, scope, name="x")
    events = _events(sessions, scope, cid, "cat")
    steps = model.requests()
    assert len(steps) == 3 and "tool_choice" not in steps[1] and steps[2]["tool_choice"] == "none"
    assert steps[2]["messages"][-1] == {"role": "system", "content": prompts.FINAL_STEP_PROMPT}
    assert events[-1][1]["message"]["content"].endswith("(stopped after 3 steps)")
    assert events[-1][1]["run_status"] == "idle"


def test_a_failing_model_falls_back_to_retrieval_with_a_note(sessions, scope, library, model):
    model.steps.append(Reply.error(500, "boom"))
    cid = _conversation(sessions, scope, name="x")
    events = _events(sessions, scope, cid, "来个cat的表情")
    reply = events[-1][1]["message"]
    assert reply["content"].startswith(agent.fallback_note("provider_failed", "zh"))
    assert [m["meme_id"] for m in reply["memes"]] == library["cats"][:3]  # the retrieval-only answer
    assert "boom" not in reply["content"]
    with sessions.begin() as session:
        payload = session.execute(
            select(Message.payload).where(Message.conversation_id == uuid.UUID(cid), Message.idx == 1)
        ).scalar_one()
        assert payload["mewdex_model"]["fallback"] == "provider_failed" and payload["mewdex"]["offset"] == 3
        outcomes = [
            e.units["outcome"]
            for e in session.execute(
                select(UsageEvent).where(UsageEvent.scope_id == scope.scope_id, UsageEvent.kind == "chat")
            ).scalars()
        ]
        assert outcomes == ["failed"]
    # "another" after the fallback pages through the retrieval list.
    model.steps.append(Reply.error(500))
    events = _events(sessions, scope, cid, "换一个")
    assert [m["meme_id"] for m in events[-1][1]["message"]["memes"]] == library["cats"][3:6]


def test_a_spent_budget_refuses_the_model_before_any_call(sessions, model):
    from accounts_helpers import delete_users, own_scope_users
    from mewdex.db.models import User

    with sessions.begin() as session:
        (user,), made = own_scope_users(session, ["budget"], role="user")
        user.quota_analysis_cost_per_month = Decimal(0)
        user_ids, scope = [uuid.UUID(u) for u in made[::-1]], ScopeContext(user.scope_id)
    try:
        cid = _conversation(sessions, scope)
        events = _events(sessions, scope, cid, "send me a meme for mondays")
        reply = events[-1][1]["message"]
        assert reply["content"].startswith(agent.fallback_note("quota_exceeded", "en"))
        assert model.fake.chat_requests() == []  # nothing was sent: neither the reply nor the title
        with sessions.begin() as session:
            rows = session.execute(select(UsageEvent).where(UsageEvent.scope_id == scope.scope_id)).scalars().all()
            assert {(e.kind, e.units["outcome"]) for e in rows} == {("chat", "refused")}
            assert session.get(Conversation, uuid.UUID(cid)).name == "send me a meme for mondays"
            assert session.get(User, user_ids[0]).quota_analysis_cost_per_month == 0
    finally:
        with sessions.begin() as session:
            session.execute(text("DELETE FROM external_system_audits WHERE user_id = ANY(:u)"), {"u": user_ids})
        delete_users(sessions, [str(u) for u in user_ids])


def test_long_conversations_are_folded_into_a_summary(sessions, scope, library, model, settings_env):
    settings_env(MEWDEX_ASSISTANT_CONTEXT_MESSAGES="4")
    cid = _conversation(sessions, scope, name="x")
    for i in range(2):
        model.steps.append(Reply.text(f"answer {i}"))
        _events(sessions, scope, cid, f"question {i}")
    assert model.requests("summary") == []  # 3 messages so far: within the window
    model.steps.append(Reply.text("answer 2"))
    _events(sessions, scope, cid, "question 2")  # 5 messages: the older 3 are folded
    summary_request = model.requests("summary")[-1]
    assert "question 0" in FakeOpenAI.prompt_text(summary_request)
    last = model.requests()[-1]
    sent = [m["content"] for m in last["messages"]]
    assert sent[1] == "Summary of the earlier conversation:\n" + model.summary
    assert sent[2:] == ["answer 1", "question 2"] and "question 0" not in FakeOpenAI.prompt_text(last)
    with sessions.begin() as session:
        conversation = session.get(Conversation, uuid.UUID(cid))
        assert conversation.context_summary == model.summary and conversation.context_base_idx == 3
        # "New topic" empties the context: the next reply sees no summary.
        conversations.new_topic(session, scope, cid)
    model.steps.append(Reply.text("fresh"))
    _events(sessions, scope, cid, "something else")
    assert [m["role"] for m in model.requests()[-1]["messages"]] == ["system", "user"]


def test_the_llm_title_is_applied_in_the_users_language_unless_renamed_or_cleared(
    sessions, scope, library, model, monkeypatch
):
    model.title = "“猫咪表情”"
    cid = _conversation(sessions, scope)
    _events(sessions, scope, cid, "来个猫的表情")
    title_request = model.requests("title")[-1]
    assert (
        "Chinese" in title_request["messages"][0]["content"] and title_request["max_tokens"] == titles.TITLE_MAX_TOKENS
    )
    wait_until(lambda: _name(sessions, cid) == "猫咪表情", what="the title")

    # A title still in flight when the user renames: dropped.
    monkeypatch.setattr(chat, "TITLE_WAIT_SECONDS", 0.05)
    model.title, model.title_gate, model.title_asked = "Late title", threading.Event(), threading.Event()
    renamed = _conversation(sessions, scope)
    _events(sessions, scope, renamed, "cats")
    assert model.title_asked.wait(10)
    with sessions.begin() as session:
        conversations.rename(session, scope, renamed, "mine")
    # …and when the conversation is cleared: dropped too (the version moved on).
    model.title_asked = threading.Event()
    cleared = _conversation(sessions, scope)
    _events(sessions, scope, cleared, "dogs")
    assert model.title_asked.wait(10)
    with sessions.begin() as session:
        conversations.clear(session, scope, cleared)
    model.title_gate.set()
    wait_until(lambda: len([e for e in _chat_events(sessions, scope) if e.units["purpose"] == "title"]) == 3)
    with sessions.begin() as session:
        assert session.get(Conversation, uuid.UUID(renamed)).name == "mine"
        back = session.get(Conversation, uuid.UUID(cleared))
        assert back.name == conversations.DEFAULT_TITLE and back.auto_title_pending is True


def _name(sessions, cid: str) -> str:
    with sessions.begin() as session:
        return session.get(Conversation, uuid.UUID(cid)).name


def _chat_events(sessions, scope) -> list[UsageEvent]:
    with sessions.begin() as session:
        return list(
            session.execute(
                select(UsageEvent).where(UsageEvent.scope_id == scope.scope_id, UsageEvent.kind == "chat")
            ).scalars()
        )


def test_titles_by_model_can_be_switched_off(sessions, scope, library, model, settings_env):
    settings_env(MEWDEX_ASSISTANT_LLM_TITLES="false")
    cid = _conversation(sessions, scope)
    _events(sessions, scope, cid, "send me a cat")
    assert model.requests("title") == [] and len(model.requests()) == 1
    with sessions.begin() as session:
        assert session.get(Conversation, uuid.UUID(cid)).name == "send me a cat"  # today's rule


def test_an_attached_image_is_searched_by_the_model_with_search_by_image(sessions, scope, library, model, monkeypatch):
    from mewdex.assistant import tools

    seen = []

    def fake_search(sessions_, scope_, image_base64, n=5):
        seen.append((scope_.scope_id, image_base64, n))
        return [{"id": library["gif"], "display_name": "dancing cat", "media_url": "", "score": 0.9, "snippet": ""}]

    monkeypatch.setattr(tools, "search_by_image", fake_search)
    model.steps.extend(
        [
            Reply.tool_call("search_by_image", {"n": 3}),
            Reply.tool_call("show_memes", {"meme_ids": [library["gif"]]}),
            Reply.text("This one."),
        ]
    )
    cid = _conversation(sessions, scope, name="x")
    events = _events(sessions, scope, cid, "", image=b"\x89PNG fake bytes")
    assert seen and seen[0][0] == scope.scope_id and seen[0][2] == 3
    first = model.requests()[0]
    assert "search_by_image" in {t["function"]["name"] for t in first["tools"]}
    assert "[the user attached an image]" in FakeOpenAI.prompt_text(first)
    assert [d["meme_id"] for n, d in events if n == "meme"] == [library["gif"]]


def test_the_models_tools_reach_the_shared_collections_a_member_chose(sessions, store, model):
    """A member that chose "use in my chat answers" for a collection shared with it: the model's
    search_memes finds the collection's meme (its member URL), show_memes shows it as a card of the
    member routes; once the choice is off the same id is not found. Never the owner's other memes."""
    from accounts_helpers import delete_users, own_scope_users
    from mewdex.library import collections, sharing
    from test_collection_members import _meme as shared_meme

    with sessions.begin() as session:
        (owner, member), made = own_scope_users(session, ["owner", "member"])
        owner_scope, member_scope, member_id = (
            ScopeContext(owner.scope_id),
            ScopeContext(member.scope_id),
            member.user_id,
        )
    try:
        inside = shared_meme(sessions, store, owner_scope.scope_id, 7101, "bandicoot on a bicycle")
        outside = shared_meme(sessions, store, owner_scope.scope_id, 7102, "bandicoot kept private")
        with sessions.begin() as session:
            c = collections.create(session, owner_scope, "Marsupials")
            collections.add_members(session, owner_scope, c.id, [inside])
            sharing.set_member(session, owner_scope, c.id, member.email, "viewer")
            sharing.set_use_in_chat(session, member_scope, member_id, c.id, True)
        media = sharing.member_media_path(c.id, inside)
        model.steps.extend(
            [
                Reply.tool_call("search_memes", {"query": "bandicoot", "n": 5}),
                Reply.calls([("show_memes", {"meme_ids": [inside, outside]})]),
                Reply.text("A bandicoot."),
            ]
        )
        events = _events(sessions, member_scope, _conversation(sessions, member_scope), "bandicoot please")
        found = json.loads(list(FakeOpenAI.tool_results(model.requests()[1]).values())[0])
        assert [h["id"] for h in found] == [inside]  # never the owner's meme outside the collection
        cards = [d for n, d in events if n == "meme"]
        assert [(d["meme_id"], d["media_url"], d["page_url"]) for d in cards] == [
            (inside, media, f"/collections/{c.id}")
        ]

        from mewdex.assistant import tools  # MCP's search_memes: the same, with the member URL

        assert [(h["id"], h["media_url"]) for h in tools.search_memes(sessions, member_scope, "bandicoot")] == [
            (inside, media)
        ]
        facts, picture, _ = tools.get_meme(sessions, member_scope, inside)  # MCP's get_meme of what it found
        assert (facts["id"], facts["media_url"], facts["collections"]) == (inside, media, ["Marsupials"])
        assert picture  # read from the owner's store
        with pytest.raises(AssistantError) as outside_pool:
            tools.get_meme(sessions, member_scope, outside)
        assert outside_pool.value.code == "not_found"
        with sessions.begin() as session:
            sharing.set_use_in_chat(session, member_scope, member_id, c.id, False)
        assert tools.search_memes(sessions, member_scope, "bandicoot") == []
        with pytest.raises(AssistantError):
            tools.get_meme(sessions, member_scope, inside)
        model.steps.extend([Reply.calls([("show_memes", {"meme_ids": [inside]})]), Reply.text("none")])
        events = _events(sessions, member_scope, _conversation(sessions, member_scope), "again")
        assert [d for n, d in events if n == "meme"] == []
    finally:
        delete_users(sessions, made)
