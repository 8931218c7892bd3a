"""``mewdex rename`` and ``mewdex delete`` (to the trash, then ``--forever``) as real subprocesses."""

from __future__ import annotations

from sqlalchemy import select

from library_helpers import check_storage_invariants, png
from mewdex.db.models import Meme
from mewdex.library.memes import add_image


def test_cli_rename_and_delete(mewdex_env, sessions, store, scope):
    meme_id = add_image(sessions, store, scope, png(900), filename="cli meme.png", provenance={}).meme_id

    proc = mewdex_env.cli("rename", meme_id, "  a better name.png ", scope=scope.scope_id, check=True)
    assert "revision 2" in proc.stdout
    with sessions.begin() as session:
        assert session.execute(select(Meme.display_name, Meme.name_source).where(Meme.id == meme_id)).one() == (
            "a better name",
            "manual",
        )
    bad = mewdex_env.cli("rename", meme_id, " .. ", scope=scope.scope_id)
    assert bad.returncode == 2 and "display_name_invalid" in bad.stderr

    # delete moves it to the trash (the row and its file stay); --forever deletes it for good
    assert mewdex_env.cli("delete", meme_id, scope=scope.scope_id, check=True).returncode == 0
    with sessions.begin() as session:
        assert session.execute(select(Meme.deleted_at).where(Meme.id == meme_id)).scalar_one() is not None
    check_storage_invariants(sessions, store, scope)
    assert mewdex_env.cli("delete", "--forever", meme_id, scope=scope.scope_id, check=True).returncode == 0
    with sessions.begin() as session:
        assert session.execute(select(Meme).where(Meme.id == meme_id)).first() is None
    check_storage_invariants(sessions, store, scope)
