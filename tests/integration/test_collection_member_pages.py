"""Issue 43, item 5, the member's side of a shared collection, with sign-in required and three real
accounts: the member's collection page (read-only for a viewer, with the owner's name and a search
inside it; an editor also gets its own memes to add), the collections list's "Shared with me", the
member's "use in my chat answers" choice and what it does to the member's web chat (a meme only the
shared collection has is found and shown with the member URLs while it is on; not when off, not after
removal, never for a third account), and the refusal of a disabled member or a disabled owner's members
(:func:`mewdex.library.sharing.access`). One app per test (the accounts fixture)."""

from __future__ import annotations

import uuid

from sqlalchemy import select

from accounts_helpers import bearer
from library_helpers import png
from mewdex.channels import media
from mewdex.db.models import ScopeContext, User
from mewdex.library import collections, sharing
from mewdex.platform.users import set_disabled
from test_collection_members import _meme


def _shared(auth_app, sessions, store, word: str):
    """An owner's collection holding a meme whose text is ``word`` (and one outside it), shared with a
    viewer; a third account. ``(owner, member, third, cid, inside, outside)``."""
    owner, member, third = auth_app.new("owner"), auth_app.new("member"), auth_app.new("third")
    inside = _meme(sessions, store, owner.scope_id, 5101, f"{word} juggles plums")
    outside = _meme(sessions, store, owner.scope_id, 5102, f"{word} outside the collection")
    with sessions.begin() as session:
        c = collections.create(session, ScopeContext(owner.scope_id), f"Shared {word}")
        collections.add_members(session, ScopeContext(owner.scope_id), c.id, [inside])
    cid = str(c.id)
    r = auth_app.client().put(
        f"/api/v1/collections/{cid}/members/{member.email}", json={"role": "viewer"}, headers=bearer(owner.token)
    )
    assert r.status_code == 200, r.text
    return owner, member, third, cid, inside, outside


def test_member_page_list_and_choice(auth_app, sessions, store):
    owner, member, third, cid, inside, outside = _shared(auth_app, sessions, store, "wallaby")
    page = member.client.get(f"/collections/{cid}")
    assert page.status_code == 200, page.text
    html = page.text
    assert "Shared wallaby" in html and owner.email in html
    assert sharing.member_media_path(cid, inside) in html and outside not in html
    assert 'data-component="sharing"' not in html  # the owner's sharing section is the owner's
    assert 'data-component="member-add"' not in html  # a viewer adds nothing
    assert "Use in my chat answers" in html and "checked" not in html.split('data-member-action="use-in-chat"')[1][:20]
    found = member.client.get(f"/collections/{cid}", params={"q": "wallaby"}).text
    assert sharing.member_media_path(cid, inside) in found
    assert 'data-count="0"' in member.client.get(f"/collections/{cid}", params={"q": "zzzqqq"}).text
    member.client.cookies.set("mewdex_lang", "zh")
    assert "用于我的聊天回答" in member.client.get(f"/collections/{cid}").text
    member.client.cookies.set("mewdex_lang", "en")

    listing = member.client.get("/collections").text
    assert "Shared with me" in listing and f"/collections/{cid}" in listing and owner.email in listing
    assert sharing.member_media_path(cid, inside) + "/thumbnail" in listing  # its cover, through the member route
    assert f"/collections/{cid}" not in third.client.get("/collections").text
    assert third.client.get(f"/collections/{cid}").status_code == 404
    thumbnail = sharing.member_media_path(cid, inside) + "/thumbnail"  # the grid's pictures
    assert f'{thumbnail}"' in html and member.client.get(thumbnail).content == png(5101)  # none made yet: the original
    assert third.client.get(thumbnail).status_code == 404
    assert member.client.get(sharing.member_media_path(cid, outside) + "/thumbnail").status_code == 404
    assert 'data-component="sharing"' in owner.client.get(f"/collections/{cid}").text  # the owner's page as before

    # the choice is the member's own
    api = auth_app.client()
    path = f"/api/v1/collections/{cid}/membership"
    r = api.put(path, json={"use_in_chat": True}, headers=bearer(member.token))
    assert r.status_code == 200 and r.json() == {"collection_id": cid, "role": "viewer", "use_in_chat": True}, r.text
    assert 'data-member-action="use-in-chat" checked' in member.client.get(f"/collections/{cid}").text
    listed = api.get("/api/v1/collections", headers=bearer(member.token)).json()["collections"]
    assert [(c["id"], c["role"], c["use_in_chat"]) for c in listed if c["id"] == cid] == [(cid, "viewer", True)]
    assert api.get(f"/api/v1/collections/{cid}", headers=bearer(member.token)).json()["use_in_chat"] is True
    assert api.get(f"/api/v1/collections/{cid}", headers=bearer(owner.token)).json()["use_in_chat"] is None
    assert api.put(path, json={"use_in_chat": "yes"}, headers=bearer(member.token)).status_code == 422
    assert api.put(path, json={"use_in_chat": True}, headers=bearer(third.token)).status_code == 404
    assert api.put(path, json={"use_in_chat": True}, headers=bearer(owner.token)).status_code == 404

    # an editor gets memes of its own library to add
    mine = _meme(sessions, store, member.scope_id, 5103, "my own wallaby")
    r = api.put(
        f"/api/v1/collections/{cid}/members/{member.email}", json={"role": "editor"}, headers=bearer(owner.token)
    )
    assert r.status_code == 200
    html = member.client.get(f"/collections/{cid}").text
    assert 'data-component="member-add"' in html and f'data-meme="{mine}"' in html
    assert "Use in my chat answers" in html  # changing the role keeps the choice
    with sessions.begin() as session:
        assert [a.collection.id for a in sharing.chat_pools(session, member.scope_id)] == [uuid.UUID(cid)]


def _chat(account, text: str, keep: list | None = None) -> list[dict]:
    """The memes of the reply to ``text`` in a new conversation of ``account`` (its id appended to ``keep``)."""
    c = account.client
    conversation = c.post("/api/v1/conversations", json={}, headers={"X-CSRF-Token": account.csrf}).json()["id"]
    r = c.post(
        f"/api/v1/conversations/{conversation}/messages", json={"content": text}, headers={"X-CSRF-Token": account.csrf}
    )
    assert r.status_code == 200, r.text
    if keep is not None:
        keep.append(conversation)
    return r.json()["reply"]["memes"]


def test_member_chat_answers_from_chosen_shared_collections(auth_app, sessions, store):
    owner, member, third, cid, inside, outside = _shared(auth_app, sessions, store, "numbat")
    api = auth_app.client()
    assert _chat(member, "numbat") == []  # not chosen: the member's own library only
    r = api.put(f"/api/v1/collections/{cid}/membership", json={"use_in_chat": True}, headers=bearer(member.token))
    assert r.status_code == 200
    kept: list[str] = []
    memes = _chat(member, "numbat", kept)
    assert [m["meme_id"] for m in memes] == [inside]  # never the owner's meme outside the collection
    shown = memes[0]
    assert shown["media_url"] == sharing.member_media_path(cid, inside) and shown["page_url"] == f"/collections/{cid}"
    assert member.client.get(shown["thumbnail_url"]).content == png(5101)  # the member can fetch what it was shown
    with sessions.begin() as session:  # what a channel delivery of the member may send, from where
        sent = sharing.sendable_meme(session, member.scope_id, uuid.UUID(inside))
        assert sent is not None and sent[1].scope_id == owner.scope_id
        # the one loader of every channel send reads the owner's file for the member's delivery
        assert media.meme_file(session, member.scope_id, inside).data == png(5101)
        assert media.meme_file(session, third.scope_id, inside) is None
        assert sharing.sendable_meme(session, member.scope_id, uuid.UUID(outside)) is None
        assert sharing.sendable_meme(session, third.scope_id, uuid.UUID(inside)) is None
    assert _chat(third, "numbat") == []  # a third account never
    assert api.put(f"/api/v1/collections/{cid}/membership", json={"use_in_chat": True},
                   headers=bearer(third.token)).status_code == 404  # fmt: skip
    # the message keeps the member URLs when read back
    messages = member.client.get(f"/api/v1/conversations/{kept[0]}/messages").json()["items"]
    assert any(m["media_url"] == shown["media_url"] for msg in messages for m in msg["memes"])

    r = api.put(f"/api/v1/collections/{cid}/membership", json={"use_in_chat": False}, headers=bearer(member.token))
    assert r.status_code == 200 and _chat(member, "numbat") == []  # off: gone at once
    api.put(f"/api/v1/collections/{cid}/membership", json={"use_in_chat": True}, headers=bearer(member.token))
    assert [m["meme_id"] for m in _chat(member, "numbat")] == [inside]
    assert (
        api.delete(f"/api/v1/collections/{cid}/members/{member.email}", headers=bearer(owner.token)).status_code == 204
    )
    assert _chat(member, "numbat") == []  # removal ends it at once
    with sessions.begin() as session:
        assert sharing.chat_pools(session, member.scope_id) == []
        assert sharing.sendable_meme(session, member.scope_id, uuid.UUID(inside)) is None
        assert media.meme_file(session, member.scope_id, inside) is None


def test_disabled_member_or_owner_is_refused(auth_app, sessions, store):
    owner, member, third, cid, inside, _outside = _shared(auth_app, sessions, store, "quoll")
    api = auth_app.client()
    api.put(f"/api/v1/collections/{cid}/membership", json={"use_in_chat": True}, headers=bearer(member.token))
    assert api.get(f"/api/v1/collections/{cid}/media/{inside}", headers=bearer(member.token)).status_code == 200

    def disable(account, disabled: bool) -> None:
        with sessions.begin() as session:
            user = session.execute(select(User).where(User.email == account.email)).scalar_one()
            set_disabled(session, user, disabled)

    def refused() -> None:
        with sessions.begin() as session:
            user = session.execute(select(User).where(User.email == member.email)).scalar_one()
            for need in ("read", "edit"):
                try:
                    sharing.access(session, ScopeContext(member.scope_id), user.user_id, uuid.UUID(cid), need=need)
                except collections.CollectionError as exc:
                    assert exc.code == "not_found"
                else:
                    raise AssertionError("a disabled member or a disabled owner's member was let in")
            assert sharing.chat_pools(session, member.scope_id) == []

    disable(member, True)
    refused()
    for url in (f"/api/v1/collections/{cid}", f"/api/v1/collections/{cid}/media/{inside}"):
        assert api.get(url, headers=bearer(member.token)).status_code in (401, 403, 404)
    disable(member, False)
    assert api.get(f"/api/v1/collections/{cid}", headers=bearer(member.token)).status_code == 200

    disable(owner, True)  # a disabled owner shares nothing: its members get the 404 of a missing collection
    refused()
    for url in (f"/api/v1/collections/{cid}", f"/api/v1/collections/{cid}/media/{inside}"):
        r = api.get(url, headers=bearer(member.token))
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", r.text
    assert cid not in {
        c["id"] for c in api.get("/api/v1/collections", headers=bearer(member.token)).json()["collections"]
    }
    disable(owner, False)
