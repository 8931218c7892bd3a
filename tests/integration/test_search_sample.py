"""Search over the shared, processed sample (real models, real index)."""

from __future__ import annotations

import pytest

from mewdex.search import service

KUMAMON_4 = "chinesebqb/009_KumamotoBear/KumamotoBear00004.gif"
SEARCH_HIT_KEYS = {"id", "display_name", "sha256", "score", "media_url", "snippet", "confidence", "why", "why_query"}


def ranked(sessions, sample, query, n=10, legs=service.LEGS) -> list[str]:
    """Sample keys (``<source>/<relative path>``) of the results, best first."""
    by_id = {v: k for k, v in sample.ids.items()}
    with sessions.begin() as session:
        response = service.search(session, sample.scope, query, n, legs=legs)
    return [by_id.get(str(r.id), f"?{r.id}") for r in response.results]


@pytest.mark.parametrize(
    "query,expected",
    [
        ("一个字我都不信", "vvquest/一个字我都不信.png"),  # the caption, exactly
        ("change my mind", "memegen/cmm/default.png"),  # English text only the OCR knows
        ("CHANGE MY MIND", "memegen/cmm/default.png"),
        ("get better material", "memegen/crow/default.jpg"),
        ("hello", "cases/img05_ocr_hello_transparent.png"),  # IMG-05
        ("不屑", "vvquest/不屑.png"),  # a file stem
        ("grumpycat", "memegen/grumpycat/default.jpg"),  # the folder name of a default.jpg
        ("grumpy cat", "memegen/grumpycat/default.jpg"),  # the compound split
        ("KumamotoBear", "chinesebqb/009_KumamotoBear/KumamotoBear00001.gif"),
    ],
)
def test_query_ranks_its_meme_first(sample, sessions, query, expected):
    results = ranked(sessions, sample, query)
    assert expected in sample.ids
    if expected.startswith("chinesebqb/009_KumamotoBear"):
        assert results[0].startswith("chinesebqb/009_KumamotoBear"), results
    else:
        assert results[0] == expected, results


@pytest.mark.parametrize(
    ("query", "bare"),
    [("grumpy cat meme", "grumpy cat"), ("不屑表情包", "不屑"), ("a picture of change my mind", "change my mind")],
)
def test_words_that_only_name_the_medium_do_not_change_the_ranking(sample, sessions, query, bare):
    assert ranked(sessions, sample, query) == ranked(sessions, sample, bare)


def test_chinese_caption_found_from_a_part_of_it(sample, sessions):
    assert ranked(sessions, sample, "字我都不信")[0] == "vvquest/一个字我都不信.png"


def test_an_exact_caption_brings_its_meaning_before_shared_characters(sample, sessions, monkeypatch):
    # Issue 33: "原神-我派蒙大字不识一个" shares 一, 个, 字 with the query (USE ranks it by them), "我根本不信这个东西"
    # says the same as the exact match in other words: the memes nearest to the exact match's own caption
    # vector join the fusion, and the meaning comes first.
    same, shared = "vvquest/我根本不信这个东西.png", "chinesebqb/genshin/原神-我派蒙大字不识一个.png"
    results = ranked(sessions, sample, "一个字我都不信")
    assert results[0] == "vvquest/一个字我都不信.png"
    assert results.index(same) < results.index(shared), results
    monkeypatch.setattr(service, "LIKE_FIELDS", {})  # the typed characters alone rank them the other way
    without = ranked(sessions, sample, "一个字我都不信")
    assert without.index(shared) < without.index(same), without


@pytest.mark.parametrize("query", ["從此站起來", "僅供參考"])
def test_a_traditional_query_finds_the_simplified_caption(sample, sessions, query):
    # 中国人民从此站起来了, 仅供大家参考: no word of the query is written the same way in the caption
    expected = {"從此站起來": "vvquest/中国人民从此站起来了.png", "僅供參考": "vvquest/仅供大家参考.png"}[query]
    assert ranked(sessions, sample, query, legs=("keyword",))[:1] == [expected]


def test_paraphrase_finds_the_caption_by_meaning(sample, sessions):
    # No shared words with "他这里边一个字我都不信": only the vector legs can find it.
    assert "vvquest/一个字我都不信.png" in ranked(sessions, sample, "I don't believe a single word he says", n=3)


@pytest.mark.parametrize("query", ["cafe", "café", "Café", "CAFE", "Cafe\u0301"])
def test_fn01_accent_and_case_folding_find_both(sample, sessions, query):
    both = {k for k in sample.ids if k.startswith("cases/fn01/")}
    assert len(both) == 2
    assert set(ranked(sessions, sample, query)[:2]) == both


@pytest.mark.parametrize("leg", service.LEGS)
def test_each_leg_alone_finds_the_caption(sample, sessions, leg):
    expected = "vvquest/一个字我都不信.png"
    results = ranked(sessions, sample, "一个字我都不信", n=3, legs=(leg,))
    assert expected == results[0] if leg == "keyword" else expected in results, results


def test_n_results_and_result_shape(sample, sessions):
    with sessions.begin() as session:
        response = service.search(session, sample.scope, "meme", 3)
    assert len(response.results) == 3
    body = response.as_dict()
    assert set(body) == {"results", "took_ms"}
    for r in body["results"]:
        assert set(r) == SEARCH_HIT_KEYS
        assert r["media_url"] == f"/media/{r['id']}"
    scores = [r["score"] for r in body["results"]]
    assert all(isinstance(s, float) for s in scores)


def test_results_are_unique(sample, sessions):
    results = ranked(sessions, sample, "中国", n=50)
    assert len(results) == len(set(results))
    assert len(results) <= len(sample.ids)


def test_other_scopes_never_see_the_sample(sample, sessions, scope):
    with sessions.begin() as session:
        assert service.search(session, scope, "一个字我都不信", 10).results == []
        assert service.search(session, scope, "hello", 50).results == []


@pytest.mark.parametrize(
    "query",
    [
        "%",
        "_",
        "\\",
        "%%%_",
        "'; DROP TABLE memes; --",
        "a" * 500,
        "😀" * 500,
        "NOT AND OR",
        "*",
        "()",
        "\u200b",
        "   x   ",
    ],
)
def test_odd_queries_do_not_fail(sample, sessions, query):
    with sessions.begin() as session:
        service.search(session, sample.scope, query, 10)


def test_like_wildcards_are_literal(sample, sessions):
    # "%" must not phrase-match every meme (it is escaped in the LIKE pattern).
    with sessions.begin() as session:
        response = service.search(session, sample.scope, "%%", 50, legs=("keyword",))
    assert response.results == []


def test_filters_apply_in_every_leg(sample, sessions):
    from uuid import UUID

    from sqlalchemy import select

    from mewdex.db.models import Meme
    from mewdex.dto.search import SearchFilters

    gifs = SearchFilters(formats=["gif"])
    with sessions.begin() as session:
        for leg in service.LEGS:
            response = service.search(session, sample.scope, "bear", 10, legs=(leg,), filters=gifs)
            assert response.results and not response.degraded, leg
            ids = [UUID(r.id) for r in response.results]
            extensions = set(session.execute(select(Meme.extension).where(Meme.id.in_(ids))).scalars())
            assert extensions == {".gif"}, (leg, extensions)


def test_results_carry_a_confidence_and_nonsense_has_no_strong_match(sample, client_for_sample):
    """Issue 19 point 3: the API says how much to trust each result; a nonsense query has no high one."""
    exact = client_for_sample.post("/api/v1/search", json={"query": "一个字我都不信", "n_results": 10}).json()
    assert exact["results"][0]["id"] == sample.ids["vvquest/一个字我都不信.png"]
    assert exact["results"][0]["confidence"] == "high"
    assert {r["confidence"] for r in exact["results"]} <= {"high", "medium", "low"}
    nonsense = client_for_sample.post("/api/v1/search", json={"query": "qqqqzzzzxxxx", "n_results": 20}).json()
    assert nonsense["results"], "the closest memes are still listed"
    assert all(r["confidence"] in ("medium", "low") for r in nonsense["results"]), nonsense


@pytest.mark.parametrize(
    "query,expected",
    [
        ("可爱的熊本熊", ("chinesebqb/009_KumamotoBear/KumamotoBear00001.gif", KUMAMON_4)),  # the vectors agree
        ("一个字我都不信", ("vvquest/一个字我都不信.png",)),  # the exact caption
        ("angry cat", ("memegen/grumpycat/default.jpg",)),  # a keyword hit
        ("兔子不约", ("chinesebqb/nanian_natu/那年那兔那些事-不约.jpg",)),
    ],
)
def test_a_correct_first_result_is_never_under_no_strong_match_in_chat_or_page(
    sample, sessions, client_for_sample, query, expected
):
    """Issue 45: one rule (confidence.strong_match over the query's first results) labels the query
    for the chat and the search page alike; where the first result is right, neither says "no strong
    match" or anything like "nothing matches"."""
    from mewdex.assistant import chat, conversations
    from mewdex.search.confidence import strong_match

    right = {sample.ids[key] for key in expected}
    api = client_for_sample.post("/api/v1/search", json={"query": query, "n_results": 20}).json()["results"]
    assert api[0]["id"] in right
    assert strong_match([r["confidence"] for r in api])
    page = client_for_sample.get("/ui/search", params={"q": query}).text
    assert "no-strong-match" not in page
    assert api[0]["id"] in page.split('class="weaker"')[0]  # presented as found, not as weaker
    with sessions.begin() as session:
        cid = conversations.create(session, sample.scope).conversation_id
    for lang, found in (("en", "Here are memes for"), ("zh", "找到了")):
        reply = chat.post(sessions, sample.scope, cid, query, lang=lang)["reply"]
        assert reply["memes"][0]["meme_id"] in right
        assert reply["content"].startswith(found), reply["content"]


def test_nonsense_is_no_strong_match_in_chat_and_page_without_saying_nothing_matches(
    sample, sessions, client_for_sample
):
    from mewdex.assistant import chat, conversations

    page = client_for_sample.get("/ui/search", params={"q": "qqqqzzzzxxxx"}).text
    assert "no-strong-match" in page and "None of the memes matches" not in page
    with sessions.begin() as session:
        cid = conversations.create(session, sample.scope).conversation_id
    reply = chat.post(sessions, sample.scope, cid, "qqqqzzzzxxxx", lang="en")["reply"]
    assert reply["memes"] and reply["content"].startswith("I'm not sure these fit “qqqqzzzzxxxx”")
    assert "Nothing matches" not in reply["content"]


def test_search_page_groups_weaker_matches(sample, client_for_sample):
    page = client_for_sample.get("/ui/search", params={"q": "qqqqzzzzxxxx"}).text
    assert "no-strong-match" in page and 'class="weaker"' in page
    assert '<ul class="grid results">' not in page  # nothing presented as a confident result
    strong = client_for_sample.get("/ui/search", params={"q": "一个字我都不信"}).text
    assert "no-strong-match" not in strong
    assert sample.ids["vvquest/一个字我都不信.png"] in strong.split('class="weaker"')[0]  # among the strong ones


@pytest.fixture
def client_for_sample(sample):
    from conftest import client_for

    with client_for(sample.scope) as c:
        yield c


def test_search_legs_read_through_the_search_database_url(sample, sessions, monkeypatch):
    """``MEWDEX_SEARCH_DATABASE_URL``: the legs' pool connects there (here a read-only role on the same
    server stands in for a hot standby, so a leg that wrote would fail) and ranks as before."""
    from sqlalchemy import text

    from mewdex.config import get_settings
    from mewdex.db.engine import get_engine, get_primary_search_sessionmaker, get_search_sessionmaker, reset_engine

    query = "I don't believe a single word he says"
    before = ranked(sessions, sample, query)
    with sessions.begin() as session:
        session.execute(
            text(
                "DO $$ BEGIN CREATE ROLE mewdex_search_reader LOGIN PASSWORD 'reader-pw';"
                " EXCEPTION WHEN duplicate_object THEN NULL; END $$"
            )
        )
        session.execute(text("ALTER ROLE mewdex_search_reader SET default_transaction_read_only = on"))
        session.execute(text("GRANT USAGE ON SCHEMA public TO mewdex_search_reader"))
        session.execute(text("GRANT SELECT ON ALL TABLES IN SCHEMA public TO mewdex_search_reader"))
    replica = get_engine().url.set(username="mewdex_search_reader", password="reader-pw")
    monkeypatch.setenv("MEWDEX_SEARCH_DATABASE_URL", replica.render_as_string(hide_password=False))
    get_settings.cache_clear()
    reset_engine()
    try:
        assert ranked(sessions, sample, query) == before
        with sessions.begin() as session:  # no leg fell back to "degraded" on the replica
            assert service.search(session, sample.scope, query, 10).degraded == []
        with get_search_sessionmaker()() as session:
            assert session.execute(text("SELECT current_user")).scalar() == "mewdex_search_reader"
        # what a search writes (the optional steps' metering) goes to the main database
        with get_primary_search_sessionmaker().begin() as session:
            assert session.execute(text("SELECT current_user")).scalar() != "mewdex_search_reader"
            assert session.execute(text("SHOW transaction_read_only")).scalar() == "off"
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
        reset_engine()
        with sessions.begin() as session:
            session.execute(text("DROP OWNED BY mewdex_search_reader"))
            session.execute(text("DROP ROLE mewdex_search_reader"))
