"""The newest revision read from the migration scripts' file names (``db.migrate.head_revision``, the
start-up's fast path) is Alembic's own head, and the history is one line of four-digit revisions."""

from __future__ import annotations

from alembic.script import ScriptDirectory

from mewdex.db.migrate import MIGRATIONS, alembic_config, head_revision


def test_the_file_names_give_alembics_head():
    script = ScriptDirectory.from_config(alembic_config())
    assert head_revision() == script.get_current_head()


def test_each_revision_is_its_files_number_and_follows_the_one_before():
    script = ScriptDirectory.from_config(alembic_config())
    revisions = list(reversed(list(script.walk_revisions())))
    files = sorted(p.name for p in (MIGRATIONS / "versions").glob("[0-9][0-9][0-9][0-9]_*.py"))
    assert [r.revision for r in revisions] == [name[:4] for name in files]
    assert [r.down_revision for r in revisions] == [None, *(r.revision for r in revisions[:-1])]
