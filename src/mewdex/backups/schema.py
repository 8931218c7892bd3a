"""What a backup's dump may define: its table of contents checked before any database is touched
(:func:`check_dump`), then what its entries define compared with mewdex's own schema at the backup's
revision (:class:`Reference`, built in scratch databases beside the target; the package's docstring
says why)."""

from __future__ import annotations

import re
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from mewdex.backups.archive import DUMP, BackupError
from mewdex.backups.database import _connect, _pg_binary

# What a dump of mewdex's schema holds (``pg_restore -l`` of a real one): these kinds of entry, in
# ``public``, and these extensions. Checked before any database is touched; what the entries define
# is then compared with mewdex's own schema (:class:`Reference`).
_TOC_KINDS = (
    "TABLE DATA", "TABLE", "SEQUENCE OWNED BY", "SEQUENCE SET", "SEQUENCE", "DEFAULT", "INDEX",
    "FK CONSTRAINT", "CONSTRAINT", "FUNCTION", "TRIGGER", "EXTENSION", "COMMENT",
)  # fmt: skip
#: The entries that fill tables rather than define anything (left out of the trial restore).
_DATA_KINDS = ("TABLE DATA", "SEQUENCE SET")
EXTENSIONS = ("vector", "pg_trgm")
_TOC_LINE = re.compile(r"(\d+); (\d+) (\d+) (.*)")


def _toc_entry(line: str) -> tuple[str | None, list[str]]:
    """(kind, the words after it) of a ``pg_restore -l`` line; kind None when it is none of :data:`_TOC_KINDS`."""
    match = _TOC_LINE.fullmatch(line.rstrip())
    kind = next((k for k in _TOC_KINDS if match and match[4].startswith(k + " ")), None)
    return kind, (match[4][len(kind) + 1 :].split(" ") if match and kind else [])


def check_dump(dump: Path) -> list[str]:
    """The dump's table of contents (``pg_restore -l``), checked before any database is touched: only
    the kinds of entry mewdex's schema has (:data:`_TOC_KINDS`), in ``public``; the extensions only
    :data:`EXTENSIONS`. Returns the entry lines to restore (the extensions and their comments left
    out: restore makes them itself). ``backup_dump_unexpected`` names the first other. Which objects
    the entries define, and how, is :class:`Reference`'s to check: a crafted archive's entry may run any SQL."""
    proc = subprocess.run([_pg_binary("pg_restore"), "-l", str(dump)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise BackupError("backup_corrupted", f"{DUMP} is not a database dump pg_restore reads")
    keep = []
    for line in proc.stdout.splitlines():
        if not line.strip() or line.startswith(";"):
            continue
        kind, rest = _toc_entry(line)
        ok = kind is not None and len(rest) >= 2
        if ok and kind == "EXTENSION":
            ok = rest[0] == "-" and rest[1] in EXTENSIONS
        elif ok and kind == "COMMENT":
            ok = rest[:2] == ["-", "EXTENSION"] and len(rest) >= 3 and rest[2] in EXTENSIONS
        elif ok:
            ok = rest[0] == "public"
        if not ok:
            shown = line if len(line) <= 160 else line[:157] + "..."
            raise BackupError(
                "backup_dump_unexpected",
                f"the backup's {DUMP} holds an entry mewdex does not create ({shown}): refused, nothing restored",
            )
        if kind not in ("EXTENSION", "COMMENT"):
            keep.append(line)
    return keep


# ---------------------------------------------------------------- the restored schema against mewdex's own

_USER_NS = "n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'"


def _not_member(catalog: str, oid: str) -> str:
    """SQL: the object is not part of an extension (those are made by ``CREATE EXTENSION``, not the dump)."""
    return (
        f"NOT EXISTS (SELECT 1 FROM pg_depend e WHERE e.classid = '{catalog}'::regclass AND e.objid = {oid}"
        " AND e.deptype = 'e')"
    )


#: What a database defines, as (key naming the object, its definition) rows: every object any
#: dependency names, by identity (whatever its class: collations, statistics, operator classes…), then
#: the definition of each object that runs or decides what runs — functions, triggers, indexes,
#: column defaults, constraints, views, rules, policies, relations and columns (with privileges, row
#: security, inheritance), event triggers, casts, operators, types, extensions, schemas, publications.
_SCHEMA_QUERIES = (
    """SELECT DISTINCT 'object ' || o.type || ' ' || o.identity, ''
    FROM (SELECT classid, objid FROM pg_depend WHERE objid >= 16384 AND objsubid = 0
          UNION SELECT classid, objid FROM pg_shdepend WHERE objid >= 16384 AND objsubid = 0
            AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())) d
    CROSS JOIN LATERAL pg_identify_object(d.classid, d.objid, 0) o
    WHERE coalesce(o.schema, '') NOT LIKE 'pg\\_%' AND coalesce(o.schema, '') <> 'information_schema'
      AND NOT EXISTS (SELECT 1 FROM pg_depend e WHERE e.classid = d.classid AND e.objid = d.objid
                      AND e.deptype IN ('e', 'i'))""",
    f"""SELECT 'function ' || p.oid::regprocedure::text,
      CASE WHEN p.prokind = 'a' THEN (SELECT format('aggregate %s %s %s %s', a.aggtransfn, a.aggfinalfn,
        a.aggcombinefn, format_type(a.aggtranstype, NULL)) FROM pg_aggregate a WHERE a.aggfnoid = p.oid)
      ELSE pg_get_functiondef(p.oid) END || format(' acl=%s', p.proacl)
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE {_USER_NS} AND {_not_member("pg_proc", "p.oid")}""",
    f"""SELECT 'trigger ' || quote_ident(t.tgname) || ' on ' || t.tgrelid::regclass::text,
      pg_get_triggerdef(t.oid) || ' enabled=' || t.tgenabled::text
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE NOT t.tgisinternal AND {_USER_NS}""",
    f"""SELECT 'index ' || i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE {_USER_NS} AND {_not_member("pg_class", "i.indrelid")}""",
    f"""SELECT 'default ' || d.adrelid::regclass::text || '.' || quote_ident(a.attname),
      pg_get_expr(d.adbin, d.adrelid)
    FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
    JOIN pg_class c ON c.oid = d.adrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE {_USER_NS}""",
    f"""SELECT 'constraint ' || quote_ident(k.conname) || ' on '
        || CASE WHEN k.conrelid <> 0 THEN k.conrelid::regclass::text ELSE k.contypid::regtype::text END,
      k.contype::text || ' ' || pg_get_constraintdef(k.oid)
    FROM pg_constraint k JOIN pg_namespace n ON n.oid = k.connamespace
    WHERE {_USER_NS} AND {_not_member("pg_constraint", "k.oid")}
      AND (k.conrelid = 0 OR NOT EXISTS (SELECT 1 FROM pg_depend e WHERE e.classid = 'pg_class'::regclass
           AND e.objid = k.conrelid AND e.deptype = 'e'))
      AND (k.contypid = 0 OR NOT EXISTS (SELECT 1 FROM pg_depend e WHERE e.classid = 'pg_type'::regclass
           AND e.objid = k.contypid AND e.deptype = 'e'))""",
    f"""SELECT 'relation ' || c.oid::regclass::text,
      format('%s %s rls=%s/%s acl=%s options=%s inherits=%s partition=%s/%s am=%s view=%s', c.relkind,
        c.relpersistence, c.relrowsecurity, c.relforcerowsecurity, c.relacl, c.reloptions,
        (SELECT array_agg(h.inhparent::regclass::text ORDER BY h.inhseqno) FROM pg_inherits h
         WHERE h.inhrelid = c.oid),
        CASE WHEN c.relkind = 'p' THEN pg_get_partkeydef(c.oid) END,
        CASE WHEN c.relispartition THEN pg_get_expr(c.relpartbound, c.oid) END,
        (SELECT amname FROM pg_am WHERE oid = c.relam),
        CASE WHEN c.relkind IN ('v', 'm') THEN pg_get_viewdef(c.oid) END)
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c', 'S') AND {_USER_NS} AND {_not_member("pg_class", "c.oid")}""",
    f"""SELECT 'column ' || a.attrelid::regclass::text || '.' || quote_ident(a.attname),
      format('%s notnull=%s identity=%s generated=%s collation=%s acl=%s', format_type(a.atttypid, a.atttypmod),
        a.attnotnull, a.attidentity, a.attgenerated, a.attcollation::regcollation, a.attacl)
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c')
      AND {_USER_NS} AND {_not_member("pg_class", "c.oid")}""",
    f"""SELECT 'rule ' || quote_ident(r.rulename) || ' on ' || r.ev_class::regclass::text,
      pg_get_ruledef(r.oid) || ' enabled=' || r.ev_enabled::text
    FROM pg_rewrite r JOIN pg_class c ON c.oid = r.ev_class JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE {_USER_NS} AND {_not_member("pg_class", "c.oid")}""",
    """SELECT 'policy ' || quote_ident(p.polname) || ' on ' || p.polrelid::regclass::text,
      format('%s %s roles=%s using=%s check=%s', p.polcmd, p.polpermissive,
        (SELECT array_agg(CASE WHEN r = 0 THEN 'public' ELSE r::regrole::text END ORDER BY 1)
         FROM unnest(p.polroles) r),
        pg_get_expr(p.polqual, p.polrelid), pg_get_expr(p.polwithcheck, p.polrelid))
    FROM pg_policy p""",
    """SELECT 'event trigger ' || quote_ident(evtname),
      format('%s %s %s %s', evtevent, evtfoid::regprocedure, evtenabled, evttags) FROM pg_event_trigger""",
    f"""SELECT 'cast ' || format_type(k.castsource, NULL) || ' as ' || format_type(k.casttarget, NULL),
      format('%s %s %s', k.castfunc::regprocedure, k.castcontext, k.castmethod)
    FROM pg_cast k WHERE k.oid >= 16384 AND {_not_member("pg_cast", "k.oid")}""",
    f"""SELECT 'operator ' || o.oid::regoperator::text,
      format('%s %s %s %s %s %s %s', o.oprcode::oid::regprocedure, o.oprrest::oid::regprocedure,
        o.oprjoin::oid::regprocedure, o.oprcom::regoperator, o.oprnegate::regoperator, o.oprcanhash,
        o.oprcanmerge)
    FROM pg_operator o JOIN pg_namespace n ON n.oid = o.oprnamespace
    WHERE {_USER_NS} AND {_not_member("pg_operator", "o.oid")}""",
    f"""SELECT 'type ' || t.oid::regtype::text,
      format('%s %s %s %s %s %s %s %s %s', t.typtype, format_type(t.typbasetype, t.typtypmod), t.typnotnull,
        t.typdefault, t.typinput, t.typoutput, t.typacl,
        (SELECT array_agg(e.enumlabel ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid),
        (SELECT format_type(g.rngsubtype, NULL) || ' ' || g.rngcanonical || ' ' || g.rngsubdiff
         FROM pg_range g WHERE g.rngtypid = t.oid))
    FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
    WHERE {_USER_NS} AND {_not_member("pg_type", "t.oid")}
      AND NOT EXISTS (SELECT 1 FROM pg_class c WHERE c.oid = t.typrelid AND c.relkind <> 'c')
      AND NOT EXISTS (SELECT 1 FROM pg_type el WHERE el.typarray = t.oid)""",
    "SELECT 'extension ' || quote_ident(extname), extnamespace::regnamespace::text FROM pg_extension",
    # public's privileges are restore's own (it recreates public); _restricted_restore checks them
    f"""SELECT 'schema ' || quote_ident(n.nspname), CASE WHEN n.nspname = 'public' THEN '' ELSE
      coalesce(n.nspacl::text, '') END FROM pg_namespace n WHERE {_USER_NS}""",
    "SELECT 'publication ' || quote_ident(pubname), '' FROM pg_publication",
)


def schema_objects(conn) -> dict[str, str]:
    """What the database of ``conn`` (psycopg) defines: ``{key naming the object: its definition}``
    (:data:`_SCHEMA_QUERIES`, names qualified: ``search_path`` is ``pg_catalog`` for the reading)."""
    objects: dict[str, str] = {}
    conn.execute("SET search_path = pg_catalog")
    try:
        for query in _SCHEMA_QUERIES:
            objects.update((key, value or "") for key, value in conn.execute(query))
    finally:
        conn.execute("RESET search_path")
    return objects


def schema_differences(expected: dict[str, str], found: dict[str, str]) -> list[str]:
    """The objects ``found`` defines otherwise than ``expected`` (both from :func:`schema_objects`),
    named without their content, sorted: ``"<key> is not mewdex's"``, ``"<key> differs"``, ``"<key>
    is missing"``."""

    def short(key: str) -> str:
        return key if len(key) <= 120 else key[:117] + "..."

    extra = [f"{short(k)} is not mewdex's" for k in sorted(found.keys() - expected.keys())]
    changed = [f"{short(k)} differs" for k in sorted(found.keys() & expected.keys()) if found[k] != expected[k]]
    missing = [f"{short(k)} is missing" for k in sorted(expected.keys() - found.keys())]
    return changed + extra + missing


def _sqlalchemy_url(url: str, env: dict[str, str]) -> str:
    from sqlalchemy.engine import make_url

    made = make_url(url).set(drivername="postgresql+psycopg")
    if env.get("PGPASSWORD"):
        made = made.set(password=env["PGPASSWORD"])
    return made.render_as_string(hide_password=False)


@contextmanager
def _scratch_database(url: str, env: dict[str, str], purpose: str) -> Iterator[str]:
    """A new empty database beside the target (from ``template0``; named
    ``mewdex_restore_<purpose>_<16 random hex>``, so it cannot be one that exists), dropped on leaving;
    yields its libpq URL. ``restore_scratch_denied`` when the configured user may not create one."""
    import psycopg
    from psycopg import sql
    from sqlalchemy.engine import make_url

    name = f"mewdex_restore_{purpose}_{secrets.token_hex(8)}"
    with _connect(url, env) as conn:
        try:
            conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
        except psycopg.errors.InsufficientPrivilege:
            raise BackupError(
                "restore_scratch_denied",
                "restore compares the backup's schema with one mewdex's migrations build in a scratch database, "
                "and the database user may not create one: grant it CREATEDB, or restore as the server's owner",
            ) from None
    try:
        yield make_url(url).set(database=name).render_as_string(hide_password=False)
    finally:
        with _connect(url, env) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


class Reference:
    """mewdex's own schema at a revision, built beside the target in scratch databases (see
    :func:`reference_schema`): the migrations run in one, as mewdex migrates; that schema then goes
    through ``pg_dump``/``pg_restore`` into another, as a backup's has (PostgreSQL reads some
    definitions back otherwise than the migrations wrote them: ``ARRAY['a'::varchar]::text[]``
    becomes ``ARRAY[('a'::varchar)::text]``; a second round trip changes nothing more)."""

    def __init__(self, url: str, env: dict[str, str], revision: str, tmp: Path, scratch: ExitStack):
        import psycopg
        from psycopg import sql
        from sqlalchemy import create_engine
        from sqlalchemy.pool import NullPool

        from mewdex.db.migrate import upgrade

        self.url, self.env, self.tmp, self.scratch = url, env, tmp, scratch
        self.migrated = scratch.enter_context(_scratch_database(url, env, "reference"))
        try:  # as the trial restore will, in a database of its own
            with _connect(self.migrated, env) as conn:
                for name in EXTENSIONS:
                    conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(name)))
        except psycopg.errors.InsufficientPrivilege:
            raise BackupError(
                "restore_scratch_denied",
                f"restore builds mewdex's schema in a scratch database, and the database user may not create the "
                f"extensions {' and '.join(EXTENSIONS)} there: restore as a user that may (the server's owner, or a "
                "cloud database's admin role)",
            ) from None
        self.engine = create_engine(_sqlalchemy_url(self.migrated, env), poolclass=NullPool)
        scratch.callback(self.engine.dispose)
        upgrade(self.engine, revision)
        self.objects: dict[str, str] | None = None

    def differences(self, conn) -> list[str]:
        """How the database of ``conn`` differs from the reference (:func:`schema_differences`;
        empty: it defines exactly the same). The first call decides which indexes mewdex made at run
        time the reference holds too: those of ``conn``'s that :func:`mewdex.search.vector_index.made_index`
        recognises are made in the reference by :func:`~mewdex.search.vector_index.ensure_index`
        itself, so they must be exactly what it makes; later calls compare with the same reference."""
        from sqlalchemy.exc import DBAPIError
        from sqlalchemy.orm import Session

        from mewdex.search import vector_index

        found = schema_objects(conn)
        if self.objects is None:
            with _connect(self.migrated, self.env) as ref:
                migrated = schema_objects(ref)
            prefix = "index public."
            made = [
                vector_index.made_index(key[len(prefix) :], found[key])
                for key in sorted(found.keys() - migrated.keys())
                if key.startswith(prefix)
            ]
            with Session(self.engine) as session, session.begin():
                for table, model, dimensions in filter(None, made):
                    try:
                        with session.begin_nested():
                            vector_index.ensure_index(session, table, model, dimensions)
                    except DBAPIError:  # one mewdex would not make (e.g. too many dimensions): a difference
                        pass
            self.objects = self._round_trip()
        return schema_differences(self.objects, found)

    def _round_trip(self) -> dict[str, str]:
        dump = self.tmp / "reference.dump"
        normal = self.scratch.enter_context(_scratch_database(self.url, self.env, "normal"))
        for command in (
            [_pg_binary("pg_dump"), "--format=custom", "--schema-only", f"--file={dump}", self.migrated],
            [_pg_binary("pg_restore"), "--no-owner", "--no-acl", "--exit-on-error", f"--dbname={normal}", str(dump)],
        ):
            proc = subprocess.run(command, env=self.env, capture_output=True, text=True)
            if proc.returncode != 0:
                raise BackupError(
                    "pg_restore_failed", f"building mewdex's reference schema failed: {proc.stderr[-500:]}"
                )
        with _connect(normal, self.env) as conn:
            return schema_objects(conn)


@contextmanager
def reference_schema(url: str, env: dict[str, str], revision: str, tmp: Path) -> Iterator[Reference]:
    """A :class:`Reference` of mewdex's schema at ``revision`` (a known one) on the server of ``url``;
    its scratch databases are dropped on leaving. ``tmp``: a private folder for its dump."""
    with ExitStack() as scratch:
        yield Reference(url, env, revision, tmp, scratch)
