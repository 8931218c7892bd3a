"""Retrieval-only assistant benchmark: the dev queries phrased the way people ask in a chat.

For each dev query, each chat phrasing ("来个……的表情", "send me a meme for …", …) goes through the
assistant exactly as a chat message does (a conversation, ``chat.begin`` + ``chat.stream``); the
figure is S@3, the share of messages with a relevant meme among the 3 memes shown, beside plain
search on the bare query (its top 3) in the same run. The chat phrasing must not cost more than
0.02. Also the median and p95 time from posting the message to the first meme card.

Run: .venv/bin/python bench/assistant.py [--data-dir DIR]   (DIR from bench/quality.py or corpus.py;
without it the corpus is imported and processed first, which takes long)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import corpus

ZH = ["来个{q}的表情", "给我一张{q}的图", "{q}的表情包"]
EN = ["send me a meme for {q}", "can you find me a meme about {q}", "I need a reaction for {q}"]
SHOWN = 3
BUDGET = 0.02


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data-dir", help="reuse a data dir that already holds the processed corpus")
    args = parser.parse_args()
    data_dir = corpus.use_data_dir(args.data_dir)
    print(f"data dir: {data_dir}")
    from mewdex.assistant import chat, conversations
    from mewdex.db.engine import get_sessionmaker
    from mewdex.library.scopes import default_scope
    from mewdex.pipeline.status import status
    from mewdex.search import service
    from mewdex.web.app import prepare_database

    prepare_database()
    sessions, scope = get_sessionmaker(), default_scope()
    with sessions.begin() as session:
        if status(session, scope)["memes"] == 0:
            corpus.prepare()
    mapping = corpus.path_to_meme_ids()
    queries = [json.loads(line) for line in (corpus.CORPUS / "queries_dev.jsonl").open(encoding="utf-8")]

    with sessions.begin() as session:
        conversation_id = conversations.create(session, scope, name="bench").conversation_id
    plain_hits, chat_hits, first_card = [], [], []
    per_template: dict[str, list[float]] = {}
    for q in queries:
        relevant = {mapping[p] for p in q["relevant"] if p in mapping}
        with sessions.begin() as session:
            top = [str(r.id) for r in service.search(session, scope, q["query"], SHOWN).results]
        plain = 1.0 if relevant & set(top) else 0.0
        for template in ZH if q["lang"] == "zh" else EN:
            started = time.perf_counter()
            run = chat.begin(sessions, scope, conversation_id, template.format(q=q["query"]))
            shown = []
            for name, data in chat.stream(sessions, run):
                if name == "meme":
                    if not shown:
                        first_card.append((time.perf_counter() - started) * 1000)
                    shown.append(data["meme_id"])
            hit = 1.0 if relevant & set(shown) else 0.0
            chat_hits.append(hit)
            plain_hits.append(plain)
            per_template.setdefault(template, []).append(hit)
    with sessions.begin() as session:
        conversations.soft_delete(session, scope, conversation_id)

    plain_s3, chat_s3 = statistics.mean(plain_hits), statistics.mean(chat_hits)
    print(f"{len(queries)} queries × 3 phrasings = {len(chat_hits)} chat messages")
    print(f"S@3 plain search on the bare query: {plain_s3:.3f}")
    print(
        f"S@3 assistant, chat-phrased:        {chat_s3:.3f}  (difference {chat_s3 - plain_s3:+.3f}; "
        f"budget −{BUDGET}: {'ok' if plain_s3 - chat_s3 <= BUDGET else 'OVER'})"
    )
    for template, hits in per_template.items():
        print(f"  {template!r:40s} {statistics.mean(hits):.3f} (n={len(hits)})")
    if first_card:
        cuts = statistics.quantiles(first_card, n=20)
        print(f"time to the first meme card: median {statistics.median(first_card):.0f} ms, p95 {cuts[18]:.0f} ms")


if __name__ == "__main__":
    main()
