"""Backups and restores, one capability in one package: ``mewdex backup DEST`` / ``mewdex restore SRC``
and the scheduled backup.

A backup destination (a directory, or ``s3://bucket/prefix`` on the S3 store's settings) holds::

    DEST/mewdex-backup.json                        the header: format, key id, encrypted, passphrase salt
    DEST/data/<n[0:2]>/<n>                          every blob once; n = HMAC(key, "<namespace>/<key>")
    DEST/<YYYYMMDDTHHMMSSZ>/database.dump          pg_dump custom format
    DEST/<YYYYMMDDTHHMMSSZ>/secret.keys            the key ring (when there is one)
    DEST/<YYYYMMDDTHHMMSSZ>/keys/media_signing.json the media-link signing keys
    DEST/<YYYYMMDDTHHMMSSZ>/manifest.json          written last: a snapshot without one is unfinished

**The backup key** (32 bytes) is the operator's and never inside a backup: ``MEWDEX_BACKUP_KEY_FILE``
(a file of 64 hex characters), else ``MEWDEX_BACKUP_PASSPHRASE`` (scrypt, its salt in the header),
else ``<data dir>/backup.key`` (0600), which the first backup makes (``mewdex backup`` prints it once:
without it the backup cannot be restored). From it (HKDF-SHA256): the encryption key, the manifest's
MAC key and the blob-name key. Every file of a snapshot and every blob is encrypted with AES-256-GCM
in 1 MiB chunks (:func:`.archive._write_stored`: a per-file key from a random salt and the entry's name, a
random nonce per chunk, the chunk index and a final-chunk flag in the associated data, so chunks
cannot be altered, reordered or cut off); blob names are HMACs, so the destination does not show
which pictures it holds, and a second backup to the same DEST still copies only the blobs it lacks.
``encrypt=False`` (``--no-encrypt``) stores the files as they are; the manifest is MAC'd either way.

The manifest (:data:`.archive.FORMAT`, in an envelope with ``key_id``, ``encrypted``, ``body``, ``mac`` =
HMAC-SHA256 over the snapshot name, the flag and the body) holds the mewdex version, the schema
revision, row counts, the sha256 and size of every snapshot file and every blob the dump references
(``namespace``, ``key`` — whose name is its sha256 — and ``size``).

**A backup is untrusted input**: restore authenticates the manifest before using anything in it
(``backup_unauthenticated``), then checks it against the closed set a backup holds
(:func:`.archive.entries`: the dump, :data:`.archive.KEY_FILES`, blobs by canonical namespace and content address;
anything else is ``backup_entry_invalid``). Where an entry lives is decided by one function,
:func:`.archive.object_name`, from constants and content addresses, never from a manifest string. Files are
read with no-follow (regular files only), bounded by their recorded size, decrypted and hashed while
streaming, into a fresh temporary folder; nothing else is written until the whole backup verified,
the dump's table of contents included (:func:`.schema.check_dump`: only the kinds of entry mewdex's schema
has, in ``public``, and its two extensions — a check that needs no database and keeps whole classes
of entry, ACLs, large objects, publications…, from ever reaching ``pg_restore``; it names no
objects: which objects, and how they are defined, is decided by the comparison below).

**What the dump defines must be exactly mewdex's own schema**, so that no code in a backup — not
even the body of one of mewdex's own functions, which the app's triggers later run as the
database's superuser — is anything mewdex did not write (:class:`.schema.Reference`). Restore builds the
reference beside the target, in scratch databases on the same server (``mewdex_restore_<purpose>_<16
random hex>``, from ``template0``; dropped however restore ends): mewdex's migrations run up to the
backup's schema revision, as mewdex migrates, and the result goes through the same
``pg_dump``/``pg_restore`` a backup's schema went through (PostgreSQL reads some definitions back
otherwise than the migrations wrote them). The indexes mewdex makes at run time (the per-model HNSW
indexes, :func:`mewdex.search.vector_index.made_index`) are made in the reference by the function
that makes them. :func:`.schema.schema_objects` reads both sides: every object any dependency names (any
class), and the definitions of functions (``pg_get_functiondef``: body, ``SECURITY DEFINER``,
``SET``, volatility; privileges), triggers (enabled or not), indexes, column defaults, constraints,
relations and columns (kind, privileges, row security, inheritance, views' queries), rules,
policies, event triggers, casts, operators, types, extensions, schemas and publications; owners
are left out, since all the dump makes belongs to the restore role until it passes to the database's
owner. Any object more, less or defined otherwise is refused by name, never by content
(``backup_dump_unexpected``). The dump's schema is first restored into a third scratch database and
compared there, before the target is touched (a ``--force`` restore keeps what it would have
replaced); then the dump is restored into the target by a throw-away role that owns only its schema
(no superuser, no ``pg_execute_server_program``), and what was restored is compared again before the
role's objects pass to the database's owner (an entry that fills a table may run SQL too): any
difference empties the schema. The configured database user needs ``CREATEDB`` for the scratch
databases, and the right to create :data:`.schema.EXTENSIONS` in them (``restore_scratch_denied``). The
check costs about three seconds (migrations, one schema round trip, one schema-only restore),
whatever the library's size. The run-time indexes are made in today's form: a later change of that
form must still recognise, and make, the older one for backups of the revisions before it.

Consistency while ``serve`` and workers run: the backup takes the backup lease
(:data:`mewdex.storage.journal.BACKUP_LEASE_KEY`, see there: blob removals are deferred while it is
held), opens one ``REPEATABLE READ`` transaction, exports its snapshot, lists the blobs in it and
runs ``pg_dump --snapshot`` on it (the embedded server's own ``pg_dump``, also against
``MEWDEX_DATABASE_URL``), then copies the blobs and releases the lease. Uploads meanwhile are simply
not in the backup. One backup runs at a time per database (``backup_running``).

Restore fills the data dir ``MEWDEX_DATA_DIR`` names (its embedded server) — or the empty external
database and store the settings name; it runs the migrations when the backup is older and refuses a
backup of a newer mewdex (``backup_too_new``) and a target that holds data unless ``force``.
Format-1 backups (before authentication) are refused (``backup_format_unsupported``).

Errors: :class:`.archive.BackupError` with a stable ``code`` (``backup_running``, ``backup_not_found``,
``backup_incomplete``, ``backup_corrupted``, ``backup_too_new``, ``backup_unauthenticated``,
``backup_format_unsupported``, ``backup_entry_invalid``, ``backup_dump_unexpected``,
``backup_key_missing``, ``backup_key_invalid``, ``backup_key_mismatch``, ``restore_target_not_empty``,
``restore_target_in_use``, ``restore_scratch_denied``, ``backup_dest_invalid``, ``backup_dest_insecure``,
``pg_dump_failed``, ``pg_restore_failed``, ``backup_store_failed``); messages name files, never a key or a credential.

The package (issue 41: a capability is a package), each module below the next:

- ``archive``: the format — constants, :class:`BackupKey` and its derived keys, the stored (encrypted)
  file format, a snapshot's entries, the sealed manifest; ``keys``: where the key comes from;
- ``targets``: a directory or an S3 prefix (the S3 client of :mod:`mewdex.storage.s3`) and DEST's
  header; ``database``: the client programs and connections; ``status``: the last result, the
  schedule, staleness;
- ``snapshot``: writing a backup and pruning; ``schema``: the dump's entries and mewdex's own schema;
  ``restore``: restoring;
- ``tasks``: the ``backup_check`` and ``backup`` task types; ``settings``: ``MEWDEX_BACKUP_*``
  (:class:`~.settings.BackupSettings`, hook ``settings``);
- ``service``: the face the web layer, the command line and ``mewdex doctor`` call (nothing else of
  the package is imported from outside it: contract ``backups-face``);
- ``card.html``: the admin page's backups card (``backups/card.html`` to the web layer's templates),
  ``locales/{en,zh}.json``: its words and its task types' labels, added to the catalogues when the
  package is imported.

Importing the package provides its plugins (``hooks.BUILTIN_PLUGINS``: the task types and the
settings group) and its words.
"""

from __future__ import annotations

from pathlib import Path

from mewdex import hooks
from mewdex.backups import settings, tasks  # noqa: F401 - importing the package provides its plugins
from mewdex.capability import Capability
from mewdex.dto import i18n

i18n.add_messages(Path(__file__).parent / "locales")

#: Its declaration (hook ``capabilities``): no error code of its reaches HTTP (a backup is the
#: command line's and the queue's; the admin page only reads its status); its templates are mounted
#: ("backups/card.html", the admin page's card).
CAPABILITY = hooks.provide("capabilities", "backups", Capability(name="backups", templates=True))
