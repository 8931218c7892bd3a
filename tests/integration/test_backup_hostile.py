"""Issue 40, findings 1, 2 and 7: a backup is untrusted input. Restore is fed manifests naming ``../``,
absolute, unknown, symlinked, oversized and special entries, a manifest without a dump, a format-1
backup, a manifest edited without the key, and a dump carrying a function + index that would run
``COPY … TO PROGRAM``: each is refused with its code, nothing is written outside a temporary folder
(the would-be targets do not exist, the data dir and the database are untouched) and nothing runs.

The manifests naming bad entries are re-sealed with the test's own key (an insider holding the key):
they pass authentication, so the closed-set checks behind it are what refuses them. So are the
dumps an insider edits within mewdex's own entries — one of mewdex's function bodies swapped, a
column default that runs SQL, an added expression index, a look-alike of mewdex's runtime index —
each restored by the real ``mewdex restore`` into an empty target: refused, nothing of it left, and
what the app does next (which fires the swapped code as the superuser) writes no marker."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from sqlalchemy import text

from channel_helpers import add_meme
from conftest import MEWDEX_BIN, TEST_ENV, drop_scope, new_scope

KEY = "9" * 64
RUNTIME_MODEL = "hostile-test-model"


@pytest.fixture(scope="module")
def made(mewdex_env, sessions, store, tmp_path_factory):
    """One real encrypted backup of a library with a meme: (dest, snapshot name, key)."""
    from mewdex.backups.keys import parse_key
    from mewdex.backups.snapshot import backup
    from mewdex.config import get_settings
    from mewdex.search.vector_index import ensure_index

    base = tmp_path_factory.mktemp("hostile")
    (base / "backup.key").write_text(KEY)
    os.environ["MEWDEX_BACKUP_KEY_FILE"] = str(base / "backup.key")
    get_settings.cache_clear()
    scope = new_scope(sessions, "hostile")
    add_meme(sessions, store, scope, "a hostile test meme")
    with sessions.begin() as session:  # an index mewdex makes outside its migrations: a backup holds it
        ensure_index(session, "meme_embeddings", RUNTIME_MODEL, 8)
    try:
        summary = backup(base / "dest")
        yield base / "dest", summary["snapshot"], parse_key(KEY, "the test key")
    finally:
        os.environ.pop("MEWDEX_BACKUP_KEY_FILE", None)
        get_settings.cache_clear()
        drop_scope(sessions, scope)


def _state(sessions) -> tuple[int, list[str]]:
    """(tables in public, the data dir's entries): what a refused restore must leave as it was."""
    from mewdex.config import get_settings

    with sessions.begin() as session:
        tables = session.execute(text("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")).scalar_one()
    data_dir = get_settings().data_dir.resolve()
    return tables, sorted(str(p.relative_to(data_dir)) for p in data_dir.rglob("*") if "pgdata" not in p.parts)


def _copy(made, tmp_path: Path) -> Path:
    dest, snapshot, _ = made
    copy = tmp_path / "dest"
    shutil.copytree(dest, copy, symlinks=True)
    return copy / snapshot


def _reseal(made, snapshot_dir: Path, change) -> None:
    from mewdex.backups.archive import seal_manifest
    from mewdex.backups.targets import DirTarget, read_manifest

    dest, snapshot, key = made
    manifest = read_manifest(DirTarget(dest), snapshot, key)
    manifest.pop("encrypted")
    change(manifest)
    (snapshot_dir / "manifest.json").write_bytes(seal_manifest(key, snapshot, manifest, encrypted=True))


def _refused(snapshot_dir: Path, sessions) -> str:
    """The code restore refuses ``snapshot_dir`` with (``force``: the next step would be the drop)."""
    from mewdex.backups.archive import BackupError
    from mewdex.backups.restore import restore

    before = _state(sessions)
    with pytest.raises(BackupError) as refused:
        restore(snapshot_dir, force=True)
    assert _state(sessions) == before, "a refused restore changed the data dir or the database"
    return refused.value.code


def test_manifest_names_outside_the_closed_set_are_refused_and_nothing_lands_there(made, sessions, tmp_path):
    snapshot_dir = _copy(made, tmp_path)
    escape = tmp_path / "escaped.txt"
    absolute = tmp_path / "absolute.txt"
    facts = {"sha256": "0" * 64, "size": 4}
    names = [f"../../{escape.name}", "../" * 12 + str(escape).lstrip("/"), str(absolute), "extra.txt", "keys/../x"]
    for name in names:
        _reseal(made, snapshot_dir, lambda m, name=name: m["files"].__setitem__(name, facts))
        assert _refused(snapshot_dir, sessions) == "backup_entry_invalid", name
    bad_blobs = [
        {"namespace": "../../etc", "key": "a" * 64 + ".png", "size": 1},
        {"namespace": str(uuid.uuid4()), "key": "../../" + "a" * 58 + ".png", "size": 1},
        {"namespace": str(uuid.uuid4()), "key": "A" * 64 + ".png", "size": 1},
        {"namespace": str(uuid.uuid4()), "key": "a" * 64 + ".exe", "size": 1},
        {"namespace": str(uuid.uuid4()), "key": "a" * 64 + ".png", "size": -1},
    ]
    for blob in bad_blobs:
        _reseal(made, snapshot_dir, lambda m, blob=blob: m["blobs"].append(blob))
        assert _refused(snapshot_dir, sessions) == "backup_entry_invalid", blob
    assert not escape.exists() and not absolute.exists()
    assert not any(Path("/").glob("escaped.txt")) and not Path("/etc/a" + "a" * 63 + ".png").exists()


def test_a_manifest_without_a_dump_is_refused_before_the_target_is_touched(made, sessions, tmp_path):
    snapshot_dir = _copy(made, tmp_path)
    _reseal(made, snapshot_dir, lambda m: m["files"].pop("database.dump"))
    assert _refused(snapshot_dir, sessions) == "backup_incomplete"


def test_links_special_files_and_oversized_entries_are_refused(made, sessions, tmp_path):
    from mewdex.backups.archive import entries, object_name
    from mewdex.backups.targets import DirTarget, read_manifest

    dest, snapshot, key = made
    snapshot_dir = _copy(made, tmp_path)
    secret = tmp_path / "local-secret"
    secret.write_text("a file of this machine")
    dump = snapshot_dir / "database.dump"
    saved = dump.read_bytes()
    dump.unlink()
    dump.symlink_to(secret)  # a link to a local file: never followed
    assert _refused(snapshot_dir, sessions) == "backup_entry_invalid"
    dump.unlink()
    os.mkfifo(dump)  # a FIFO: refused without blocking
    assert _refused(snapshot_dir, sessions) == "backup_entry_invalid"
    dump.unlink()
    dump.write_bytes(saved + b"x" * 4096)  # more than recorded: refused once the bound is passed
    assert _refused(snapshot_dir, sessions) == "backup_corrupted"
    dump.write_bytes(saved)

    manifest = read_manifest(DirTarget(dest), snapshot, key)
    [blob] = [e for e in entries(manifest) if e.kind == "blob"][:1]
    blob_path = snapshot_dir.parent / object_name(key, snapshot, blob)
    blob_path.unlink()
    blob_path.symlink_to(secret)
    assert _refused(snapshot_dir, sessions) == "backup_entry_invalid"
    shutil.rmtree(snapshot_dir.parent / "data")
    (snapshot_dir.parent / "data").symlink_to(dest / "data")  # a linked folder is not walked either
    assert _refused(snapshot_dir, sessions) == "backup_entry_invalid"


def test_unauthenticated_and_format_1_backups_are_refused(made, sessions, tmp_path):
    snapshot_dir = _copy(made, tmp_path)
    envelope = json.loads((snapshot_dir / "manifest.json").read_text())
    envelope["mac"] = "0" * 64  # written by someone without the key
    (snapshot_dir / "manifest.json").write_text(json.dumps(envelope))
    assert _refused(snapshot_dir, sessions) == "backup_unauthenticated"
    old = {"format": 1, "schema_revision": "0022", "files": {"../../escaped.txt": {"sha256": "0" * 64, "size": 1}}}
    (snapshot_dir / "manifest.json").write_text(json.dumps(old))
    assert _refused(snapshot_dir, sessions) == "backup_format_unsupported"
    assert not (tmp_path / "escaped.txt").exists()


EVIL = """
CREATE TABLE victims (n int);
INSERT INTO victims VALUES (1), (2);
CREATE FUNCTION evil(n int) RETURNS int LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF current_database() <> '{scratch}' THEN  -- runs wherever it is restored, not here
    EXECUTE format('COPY (SELECT 1) TO PROGRAM %L', 'touch {marker}');
  END IF;
  RETURN n;
END $$;
CREATE INDEX victims_evil ON victims (evil(n));
"""


def _evil_dump(tmp_path: Path, marker: Path) -> Path:
    """A custom-format dump with a function + index that runs ``touch MARKER`` as it is restored."""
    import psycopg
    from sqlalchemy.engine import make_url

    from mewdex.backups.database import _libpq, _pg_binary

    url, env = _libpq()
    scratch = f"hostile_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, password=env.get("PGPASSWORD"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {scratch}")
    scratch_url = make_url(url).set(database=scratch).render_as_string(hide_password=False)
    try:
        with psycopg.connect(scratch_url, password=env.get("PGPASSWORD"), autocommit=True) as conn:
            conn.execute(EVIL.format(scratch=scratch, marker=marker))
        dump = tmp_path / "evil.dump"
        subprocess.run([_pg_binary("pg_dump"), "--format=custom", f"--file={dump}", scratch_url], env=env, check=True)
    finally:
        with psycopg.connect(url, password=env.get("PGPASSWORD"), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {scratch}")
    assert not marker.exists()
    return dump


def test_a_dump_with_a_server_side_command_is_refused_and_never_runs(made, sessions, tmp_path):
    """An insider with the key swaps in a dump whose index runs ``COPY … TO PROGRAM``: its entries are
    not what mewdex creates (refused before anything is dropped); and even past that check, the
    restore's role may not run server programs, and what it made is removed."""
    import psycopg
    from sqlalchemy.engine import make_url

    from mewdex.backups.archive import BackupError, _write_stored
    from mewdex.backups.database import _libpq, _pg_binary
    from mewdex.backups.restore import _restricted_restore, known_revisions
    from mewdex.backups.schema import reference_schema

    dest, snapshot, key = made
    marker = tmp_path / "pwned"
    dump = _evil_dump(tmp_path, marker)
    snapshot_dir = _copy(made, tmp_path)
    with open(dump, "rb") as source, open(snapshot_dir / "database.dump", "wb") as out:
        sha, size = _write_stored(key, True, f"{snapshot}/database.dump", source, out)
    _reseal(made, snapshot_dir, lambda m: m["files"].__setitem__("database.dump", {"sha256": sha, "size": size}))
    assert _refused(snapshot_dir, sessions) == "backup_dump_unexpected"
    assert not marker.exists()

    # Past the entry check (as SQL hidden in an allowed entry would be): least privilege holds.
    url, env = _libpq()
    target = f"hostile_target_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, password=env.get("PGPASSWORD"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {target}")
    target_url = make_url(url).set(database=target).render_as_string(hide_password=False)
    try:
        listing = subprocess.run(
            [_pg_binary("pg_restore"), "-l", str(dump)],
            capture_output=True, text=True, check=True,
        ).stdout.splitlines()  # fmt: skip
        everything = [line for line in listing if line.strip() and not line.startswith(";")]
        with (
            reference_schema(url, env, known_revisions()[-1], tmp_path) as reference,
            pytest.raises(BackupError) as refused,
        ):
            _restricted_restore(target_url, env, dump, everything, tmp_path, reference)
        assert refused.value.code in ("pg_restore_failed", "backup_dump_unexpected"), refused.value.message
        assert not marker.exists(), "the dump's command ran"
        with psycopg.connect(target_url, password=env.get("PGPASSWORD"), autocommit=True) as conn:
            left = conn.execute(
                "SELECT (SELECT count(*) FROM pg_proc WHERE proname = 'evil'),"
                " (SELECT count(*) FROM pg_class WHERE relname IN ('victims', 'victims_evil')),"
                " (SELECT count(*) FROM pg_roles WHERE rolname LIKE 'mewdex_restore_%')"
            ).fetchone()
        assert left == (0, 0, 0), "the function, its index or the restore role survived"
    finally:
        with psycopg.connect(url, password=env.get("PGPASSWORD"), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {target}")
    assert not marker.exists()


# ---------------------------------------------------------------- dumps edited within mewdex's own entries

SWAPPED_BODY = """
CREATE OR REPLACE FUNCTION public.mewdex_track_disk_usage() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format('COPY (SELECT 1) TO PROGRAM %L', 'touch {marker}');
  RETURN NULL;
END $$;
"""
#: A default whose function runs a query hidden in a string, which reads a server file: only the
#: superuser may, and the app's next write of a meme's name copies the file into the library.
CHANGED_DEFAULT = """
ALTER TABLE public.memes ALTER COLUMN display_name SET DEFAULT btrim(pg_catalog.ts_rewrite('x'::tsquery,
  'SELECT ''x''::tsquery, plainto_tsquery(''simple'', pg_catalog.pg_read_file(''{secret}''))')::text, '''');
"""
ADDED_INDEX = """
CREATE INDEX ix_memes_extra_bands ON public.memes USING gin (public.mewdex_phash_bands(scope_id, display_name));
"""
#: mewdex's own runtime index (its name, its table) rebuilt with other parameters.
LOOK_ALIKE_INDEX = """
DROP INDEX public.{name};
CREATE INDEX {name} ON public.meme_embeddings USING hnsw ((embedding::halfvec(8)) halfvec_cosine_ops)
  WITH (m = 4) WHERE model = '{model}' AND dimensions = 8;
"""
#: What the app does next with a restored library, as the database's superuser: changes a meme's
#: size (the disk-usage trigger) and writes a meme's name from its default.
FIRE = (
    "UPDATE memes SET size_bytes = size_bytes + 1 RETURNING display_name",
    "UPDATE memes SET display_name = DEFAULT RETURNING display_name",
)


def _cli(env: dict[str, str], *args: str) -> dict:
    full = {**os.environ, **env, "COLUMNS": "200", "NO_COLOR": "1"}
    proc = subprocess.run([str(MEWDEX_BIN), *args], env=full, capture_output=True, text=True, timeout=300)
    assert proc.stdout.strip(), f"no output (rc {proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def target(made, tmp_path):
    """An empty restore target beside the session's database: a new database on the same server and a
    new data dir; ``{"env": the CLI's environment, "url": libpq URL, "pg_env": its environment}``."""
    import psycopg
    from sqlalchemy.engine import make_url

    from mewdex.backups.database import _libpq
    from mewdex.config import get_settings
    from mewdex.db.engine import database_url

    url, env = _libpq()
    name = f"restore_target_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, password=env.get("PGPASSWORD"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    key_file = tmp_path / "backup.key"
    key_file.write_text(KEY)
    cli_env = {
        **TEST_ENV,
        "MEWDEX_DATA_DIR": str(tmp_path / "data"),
        "MEWDEX_DATABASE_URL": make_url(database_url(get_settings()))
        .set(database=name)
        .render_as_string(hide_password=False),
        "MEWDEX_BACKUP_KEY_FILE": str(key_file),
    }
    try:
        yield {
            "env": cli_env,
            "url": make_url(url).set(database=name).render_as_string(hide_password=False),
            "pg_env": env,
        }
    finally:
        with psycopg.connect(url, password=env.get("PGPASSWORD"), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def evidence():
    """(where the swapped code would write, a server file only the superuser may read, its content), in
    a folder the database server's own OS user may write to."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="mewdex-marker-"))
    folder.chmod(0o777)
    token = uuid.uuid4().hex
    (folder / "secret").write_text(token)
    (folder / "secret").chmod(0o644)
    yield folder / "pwned", folder / "secret", token
    shutil.rmtree(folder, ignore_errors=True)


def _tampered(made, tmp_path: Path, change: str) -> Path:
    """A copy of the backup whose dump is the real one restored, changed by the SQL ``change`` and dumped
    again, re-sealed with the test's key (someone holding the key, or a backed-up database someone
    altered): only the entries mewdex's schema has, under mewdex's own names."""
    import psycopg
    from sqlalchemy.engine import make_url

    from mewdex.backups.archive import _write_stored, entries
    from mewdex.backups.database import _libpq, _pg_binary
    from mewdex.backups.restore import fetch
    from mewdex.backups.targets import DirTarget, read_manifest

    dest, snapshot, key = made
    [entry] = [e for e in entries(read_manifest(DirTarget(dest), snapshot, key)) if e.name == "database.dump"]
    real, changed = tmp_path / "real.dump", tmp_path / "changed.dump"
    with open(real, "wb") as out:
        fetch(DirTarget(dest), key, snapshot, entry, True, out)
    url, env = _libpq()
    scratch = f"tamper_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, password=env.get("PGPASSWORD"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {scratch}")
    scratch_url = make_url(url).set(database=scratch).render_as_string(hide_password=False)
    try:
        subprocess.run(
            [_pg_binary("pg_restore"), "--no-owner", "--exit-on-error", f"--dbname={scratch_url}", str(real)],
            env=env, check=True, capture_output=True,
        )  # fmt: skip
        with psycopg.connect(scratch_url, password=env.get("PGPASSWORD"), autocommit=True) as conn:
            conn.execute(change)
        subprocess.run(
            [_pg_binary("pg_dump"), "--format=custom", f"--file={changed}", scratch_url], env=env, check=True
        )
    finally:
        with psycopg.connect(url, password=env.get("PGPASSWORD"), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {scratch} WITH (FORCE)")
    snapshot_dir = _copy(made, tmp_path)
    with open(changed, "rb") as source, open(snapshot_dir / "database.dump", "wb") as out:
        sha, size = _write_stored(key, True, f"{snapshot}/database.dump", source, out)
    _reseal(made, snapshot_dir, lambda m: m["files"].__setitem__("database.dump", {"sha256": sha, "size": size}))
    return snapshot_dir


def _left(target) -> dict[str, int]:
    """What a restore left: in the target database (tables, functions, indexes, triggers, defaults of
    ``public``, outside extensions) and on the server (scratch databases, restore roles)."""
    import psycopg

    with psycopg.connect(target["url"], password=target["pg_env"].get("PGPASSWORD"), autocommit=True) as conn:
        return dict(
            zip(
                ("relations", "functions", "triggers", "defaults", "scratch databases", "restore roles"),
                conn.execute(
                    "SELECT (SELECT count(*) FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace"
                    "  AND NOT EXISTS (SELECT 1 FROM pg_depend e WHERE e.objid = c.oid AND e.deptype = 'e')),"
                    " (SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace"
                    "  AND NOT EXISTS (SELECT 1 FROM pg_depend e WHERE e.objid = p.oid AND e.deptype = 'e')),"
                    " (SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal),"
                    " (SELECT count(*) FROM pg_attrdef),"
                    " (SELECT count(*) FROM pg_database WHERE datname LIKE 'mewdex\\_restore\\_%'),"
                    " (SELECT count(*) FROM pg_roles WHERE rolname LIKE 'mewdex\\_restore\\_%')"
                ).fetchone(),
                strict=True,
            )
        )


def _fire(target) -> str:
    """What the app does next with the restored library (:data:`FIRE`), as the superuser; the names
    it wrote. Statements that find nothing to act on (no such table) are skipped."""
    import psycopg

    wrote = []
    with psycopg.connect(target["url"], password=target["pg_env"].get("PGPASSWORD"), autocommit=True) as conn:
        for statement in FIRE:
            try:
                wrote += [str(row[0]) for row in conn.execute(statement)]
            except psycopg.Error:
                pass
    return " ".join(wrote)


NOTHING_LEFT = {"relations": 0, "functions": 0, "triggers": 0, "defaults": 0, "scratch databases": 0,
                "restore roles": 0}  # fmt: skip


def test_an_ordinary_backup_restores_with_mewdex_s_runtime_index(made, target, capsys):
    """The untouched backup (its schema exactly mewdex's at its revision, with the HNSW index mewdex
    made at run time) restores; the scratch databases and the role are gone afterwards."""
    from mewdex.search.vector_index import index_name

    dest, snapshot, _ = made
    summary = _cli(target["env"], "restore", str(dest / snapshot), "--json")
    assert "error" not in summary, summary
    left = _left(target)
    assert left["relations"] > 0 and left["functions"] == 8 and left["triggers"] > 0, left
    # 8: mewdex's own functions (the eighth, 0030's, deletes a task with its image-stage row)
    assert left["scratch databases"] == 0 and left["restore roles"] == 0, left
    import psycopg

    with psycopg.connect(target["url"], password=target["pg_env"].get("PGPASSWORD")) as conn:
        name = index_name("meme_embeddings", RUNTIME_MODEL, 8)
        assert conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"public.{name}",)).fetchone()[0]
    with capsys.disabled():
        print(f"\nrestore of the test backup: {summary['seconds']} s")


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (SWAPPED_BODY, "function public.mewdex_track_disk_usage() differs"),
        (CHANGED_DEFAULT, "default public.memes.display_name differs"),
    ],
    ids=["swapped-function-body", "changed-column-default"],
)
def test_mewdex_s_own_code_changed_in_the_dump_is_refused_and_never_runs(
    made, target, evidence, tmp_path, change, named
):
    marker, secret, token = evidence
    snapshot_dir = _tampered(made, tmp_path, change.format(marker=marker, secret=secret))
    answer = _cli(target["env"], "restore", str(snapshot_dir), "--json")
    wrote = _fire(target)
    assert not marker.exists() and token not in wrote, "the changed code ran as the superuser"
    assert answer.get("error", {}).get("code") == "backup_dump_unexpected", answer
    assert named in answer["error"]["message"] and str(marker) not in answer["error"]["message"]
    assert _left(target) == NOTHING_LEFT


def test_an_added_expression_index_or_a_look_alike_of_mewdex_s_index_is_refused(made, target, tmp_path):
    from mewdex.search.vector_index import index_name

    name = index_name("meme_embeddings", RUNTIME_MODEL, 8)
    impossible = index_name("meme_embeddings", RUNTIME_MODEL, 99999)  # named as mewdex would, made as it cannot
    for n, (change, named) in enumerate(
        [
            (ADDED_INDEX, "index public.ix_memes_extra_bands is not mewdex's"),
            (LOOK_ALIKE_INDEX.format(name=name, model=RUNTIME_MODEL), f"index public.{name} differs"),
            (
                f"CREATE INDEX {impossible} ON public.meme_embeddings (model)"
                f" WHERE model = '{RUNTIME_MODEL}' AND dimensions = 99999",
                f"index public.{impossible} is not mewdex's",
            ),
        ]
    ):
        (tmp_path / str(n)).mkdir()
        snapshot_dir = _tampered(made, tmp_path / str(n), change)
        answer = _cli(target["env"], "restore", str(snapshot_dir), "--json")
        assert answer.get("error", {}).get("code") == "backup_dump_unexpected", answer
        assert named in answer["error"]["message"], answer
        assert _left(target) == NOTHING_LEFT


def test_a_database_user_that_may_not_build_the_reference_is_told_what_it_needs(mewdex_env, tmp_path):
    """Without CREATEDB, or without the right to create the extensions in a new database, restore
    stops with ``restore_scratch_denied`` (what to grant), not a database traceback; nothing is left."""
    import psycopg
    from sqlalchemy.engine import make_url

    from mewdex.backups.archive import BackupError
    from mewdex.backups.database import _libpq
    from mewdex.backups.restore import known_revisions
    from mewdex.backups.schema import reference_schema

    url, env = _libpq()
    role, password = f"restorer_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    with psycopg.connect(url, password=env.get("PGPASSWORD"), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}' NOSUPERUSER NOCREATEDB")
    as_role = make_url(url).set(username=role).render_as_string(hide_password=False)
    try:
        for grant in ("", f"ALTER ROLE {role} CREATEDB"):
            if grant:
                with psycopg.connect(url, password=env.get("PGPASSWORD"), autocommit=True) as conn:
                    conn.execute(grant)
            with (
                pytest.raises(BackupError) as denied,
                reference_schema(as_role, {**env, "PGPASSWORD": password}, known_revisions()[-1], tmp_path),
            ):
                pass
            assert denied.value.code == "restore_scratch_denied", denied.value.message
            assert ("CREATEDB" if not grant else "extensions vector and pg_trgm") in denied.value.message
    finally:
        with psycopg.connect(url, password=env.get("PGPASSWORD"), autocommit=True) as conn:
            left = conn.execute("SELECT count(*) FROM pg_database WHERE datname LIKE 'mewdex\\_restore\\_%'")
            assert left.fetchone()[0] == 0, "a scratch database was left behind"
            conn.execute(f"DROP ROLE {role}")
