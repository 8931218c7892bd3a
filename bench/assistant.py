"""Assistant benchmark: the dev queries phrased the way people ask in a chat, answered retrieval-only
and with a chat model.

Each dev query, in each chat phrasing ("来个……的表情", "send me a meme for …", …), is posted to a new
conversation exactly as a chat message is (``chat.begin`` + ``chat.stream``), then the follow-up
"换一个" / "another one". Per mode it prints:

* S@3: the share of messages with a relevant meme among the 3 shown, beside plain search on the bare
  query (its top 3) in the same run; retrieval-only may not lose more than 0.02 to it;
* "another one": the share of follow-ups with a relevant meme among the next 3, and how many of them
  repeat a meme already shown (must be 0);
* answer latency (posting → ``done``) and time to the first meme card of the first message, and the
  answer latency of the follow-up, p50 / p95.

The chat model is the tests' fake OpenAI-compatible server (real HTTP, the official SDK, streamed
Chat Completions) playing a naive model: it searches with the user's message, shows the 3 best memes
not shown before and says a line. It answers at once, so its latency is mewdex's own cost of the
loop (three model round trips, metering, the tools), not a model's.

Run: .venv/bin/python bench/assistant.py [--data-dir DIR] [--queries N] [--small]
  --data-dir DIR  a data dir that holds the processed corpus (from quality.py); without it the
                  corpus is imported and processed first, which takes long;
  --small         into an empty data dir import only the files relevant to the first N queries
                  (at most 6 each) and 40 others: a quick check that the script works.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import corpus

ZH = ["来个{q}的表情", "给我一张{q}的图", "{q}的表情包"]
EN = ["send me a meme for {q}", "can you find me a meme about {q}", "I need a reaction for {q}"]
FOLLOW_UP = {"zh": "换一个", "en": "another one"}
SHOWN = 3
BUDGET = 0.02
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))] if ordered else float("nan")


def small_subset(queries: list[dict], per_query: int = 6, others: int = 40) -> list[Path]:
    chosen = {p for q in queries for p in q["relevant"][:per_query]}
    rest = sorted(
        p.relative_to(corpus.CORPUS).as_posix()
        for root in corpus.corpus_roots()
        for p in (root / "images").rglob("*")
        if p.is_file() and p.relative_to(corpus.CORPUS).as_posix() not in chosen
    )
    chosen |= set(random.Random(0).sample(rest, min(others, len(rest))))
    return [corpus.CORPUS / p for p in sorted(chosen)]


def naive_model(reply_cls, system_prompt: str, is_follow_up):
    """The fake server's handler: a model that searches with the message and shows 3 memes."""

    def answer(body: dict):
        messages = body.get("messages") or []
        if not messages or messages[0].get("content") != system_prompt:
            return reply_cls.text("Memes")  # a title or a summary
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        tool_answers = [m for m in messages[last_user + 1 :] if m["role"] == "tool"]
        if not tool_answers:
            users = [m["content"] for m in messages if m["role"] == "user"]
            query = next((u for u in reversed(users) if not is_follow_up(u)), users[-1])
            return reply_cls.tool_call("search_memes", {"query": query, "n": 12})
        last = json.loads(tool_answers[-1]["content"])
        if isinstance(last, list):
            earlier = " ".join(m.get("content") or "" for m in messages if m["role"] == "assistant")
            shown = set(_UUID.findall(earlier))
            picks = [h["id"] for h in last if h["id"] not in shown][:SHOWN]
            if picks:
                return reply_cls.tool_call("show_memes", {"meme_ids": picks})
        return reply_cls.text("These fit what you said.")

    return answer


@contextmanager
def fake_chat_model(sessions):
    """A platform chat connector pointing at the fake server, for the duration (removed after)."""
    sys.path.insert(0, str(corpus.REPO / "tests"))
    from sqlalchemy import text

    from fakes.openai_server import FakeOpenAI, Reply
    from mewdex.assistant import agent
    from mewdex.assistant.query import is_follow_up
    from mewdex.config import get_settings
    from mewdex.providers import connectors

    with FakeOpenAI() as fake:
        previous = os.environ.get("MEWDEX_EGRESS_ALLOW_HOSTS")
        os.environ["MEWDEX_EGRESS_ALLOW_HOSTS"] = json.dumps([fake.host_port])
        get_settings.cache_clear()
        fake.handler = naive_model(Reply, agent.SYSTEM_PROMPT, is_follow_up)
        with sessions.begin() as session:
            definition_id = connectors.create_definition(
                session,
                provider="openai_compatible",
                name=f"bench-fake-{uuid.uuid4().hex[:6]}",
                visibility="all",
                credentials={"api_key": fake.api_key},
                config={"base_url": fake.base_url, "chat_model": "fake-chat"},
            ).definition_id
        try:
            yield fake
        finally:
            with sessions.begin() as session:
                params = {"d": definition_id}
                session.execute(text("DELETE FROM external_system_audits WHERE definition_id = :d"), params)
                session.execute(text("DELETE FROM external_system_definitions WHERE definition_id = :d"), params)
            if previous is None:
                os.environ.pop("MEWDEX_EGRESS_ALLOW_HOSTS", None)
            else:
                os.environ["MEWDEX_EGRESS_ALLOW_HOSTS"] = previous
            get_settings.cache_clear()


def ask(sessions, scope, conversation_id, content: str) -> tuple[list[str], float, float | None]:
    """Post one message: the memes shown, ms to ``done``, ms to the first card (None: no card)."""
    from mewdex.assistant import chat

    started = time.perf_counter()
    run = chat.begin(sessions, scope, conversation_id, content)
    shown, first = [], None
    for name, data in chat.stream(sessions, run):
        if name == "meme":
            if first is None:
                first = (time.perf_counter() - started) * 1000
            shown.append(data["meme_id"])
    return shown, (time.perf_counter() - started) * 1000, first


def run_mode(sessions, scope, queries: list[dict], mapping: dict[str, str]) -> dict:
    from mewdex.assistant import conversations

    hits, again_hits, repeats, answer_ms, again_ms, card_ms = [], [], 0, [], [], []
    for q in queries:
        relevant = {mapping[p] for p in q["relevant"] if p in mapping}
        for template in ZH if q["lang"] == "zh" else EN:
            with sessions.begin() as session:
                conversation_id = conversations.create(session, scope, name="bench").conversation_id
            shown, ms, first = ask(sessions, scope, conversation_id, template.format(q=q["query"]))
            hits.append(1.0 if relevant & set(shown[:SHOWN]) else 0.0)
            answer_ms.append(ms)
            if first is not None:
                card_ms.append(first)
            more, ms, first = ask(sessions, scope, conversation_id, FOLLOW_UP[q["lang"]])
            again_hits.append(1.0 if relevant & set(more[:SHOWN]) else 0.0)
            repeats += len(set(more) & set(shown))
            again_ms.append(ms)
            with sessions.begin() as session:
                conversations.soft_delete(session, scope, conversation_id)
    return {
        "s3": sum(hits) / len(hits),
        "another_s3": sum(again_hits) / len(again_hits),
        "repeats": repeats,
        "messages": len(answer_ms) + len(again_ms),
        "answer_p50": pct(answer_ms, 0.5),
        "answer_p95": pct(answer_ms, 0.95),
        "again_p50": pct(again_ms, 0.5),
        "again_p95": pct(again_ms, 0.95),
        "card_p50": pct(card_ms, 0.5),
        "card_p95": pct(card_ms, 0.95),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", help="reuse a data dir that already holds the processed corpus")
    parser.add_argument("--queries", type=int, help="only the first N dev queries")
    parser.add_argument("--small", action="store_true", help="import only a small subset (see above)")
    args = parser.parse_args()
    data_dir = corpus.use_data_dir(args.data_dir)
    print(f"data dir: {data_dir}")
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.scopes import default_scope
    from mewdex.pipeline.status import status
    from mewdex.runtime import prepare_database
    from mewdex.search import service

    prepare_database()
    sessions, scope = get_sessionmaker(), default_scope()
    queries = corpus.dev_queries(args.queries)
    with sessions.begin() as session:
        empty = status(session, scope)["memes"] == 0
    if empty:
        corpus.prepare(paths=small_subset(queries) if args.small else None)
    mapping = corpus.path_to_meme_ids()

    plain = []
    for q in queries:
        relevant = {mapping[p] for p in q["relevant"] if p in mapping}
        with sessions.begin() as session:
            top = [str(r.id) for r in service.search(session, scope, q["query"], SHOWN).results]
        plain.append(1.0 if relevant & set(top) else 0.0)
    plain_s3 = sum(plain) / len(plain)

    results = {"retrieval-only": run_mode(sessions, scope, queries, mapping)}
    with fake_chat_model(sessions):
        results["fake chat model"] = run_mode(sessions, scope, queries, mapping)

    print(f"{len(queries)} queries × 3 phrasings, each followed by “another one”")
    print(f"S@3 plain search on the bare query: {plain_s3:.3f}")
    for mode, r in results.items():
        verdict = "ok" if plain_s3 - r["s3"] <= BUDGET else "OVER"
        print(f"[{mode}] {r['messages']} messages")
        diff = r["s3"] - plain_s3
        print(f"  S@3 chat-phrased:       {r['s3']:.3f}  (vs plain {diff:+.3f}; budget −{BUDGET}: {verdict})")
        print(f"  S@3 of “another one”:   {r['another_s3']:.3f}  (memes repeated: {r['repeats']})")
        print(f"  answer latency:         p50 {r['answer_p50']:.0f} ms, p95 {r['answer_p95']:.0f} ms")
        print(f"  time to the first card: p50 {r['card_p50']:.0f} ms, p95 {r['card_p95']:.0f} ms")
        print(f"  “another one” answered: p50 {r['again_p50']:.0f} ms, p95 {r['again_p95']:.0f} ms")


if __name__ == "__main__":
    main()
