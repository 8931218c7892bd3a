"""A local S3-protocol server for the object-store tests: moto's server (``python -m moto.server``) in a
process of its own, started once per test session, with one bucket; each test gets a prefix of its own.

``s3_server`` (session): ``S3Server`` with the endpoint, the bucket, and the environment a mewdex
process needs to use it (``MEWDEX_BLOB_STORE`` is per prefix: :meth:`S3Server.env`). The AWS
credentials are fake and set in this process's environment for the session (boto3's chain reads them).
``s3_store``: an :class:`~mewdex.storage.s3.S3BlobStore` on a fresh prefix, built the way
``blob_store()`` builds it. ``app_store``: the local store and then the S3 store as the process's
configured store (parametrized).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass

import pytest

from conftest import wait_until

BUCKET = "mewdex-test"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "mewdex-test-key",
    "AWS_SECRET_ACCESS_KEY": "mewdex-test-secret",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@dataclass
class S3Server:
    endpoint: str
    bucket: str
    process: subprocess.Popen

    def url(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}"

    def env(self, prefix: str) -> dict[str, str]:
        """What a mewdex process needs to keep its blobs under ``prefix`` on this server."""
        return {
            **CREDENTIALS,
            "MEWDEX_BLOB_STORE": self.url(prefix),
            "MEWDEX_S3_ENDPOINT_URL": self.endpoint,
            "MEWDEX_S3_ADDRESSING_STYLE": "path",
        }

    def store(self, prefix: str):
        from mewdex.storage import s3

        return s3.from_settings(
            self.url(prefix), endpoint_url=self.endpoint, region="us-east-1", addressing_style="path"
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    saved = {k: os.environ.get(k) for k in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=out
        )

    def listening() -> bool:
        assert process.poll() is None, f"moto server exited: {log.read_text()[-2000:]}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    try:
        wait_until(listening, 60, 0.2, lambda: f"the moto server to listen: {log.read_text()[-2000:]}")
        server = S3Server(f"http://127.0.0.1:{port}", BUCKET, process)
        server.store("").client.create_bucket(Bucket=BUCKET)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def s3_store(s3_server):
    """An S3 blob store on a prefix of this test's own."""
    return s3_server.store(f"t-{uuid.uuid4().hex[:12]}")


@pytest.fixture(params=["local", "s3"])
def app_store(request, settings_env):
    """The blob store the app (and every ``blob_store()`` call) uses in this test: the local one, or
    an S3 store on a prefix of the test's own (settings changed for the test, restored after). Ask
    for it before ``client`` so the app starts with it."""
    from mewdex.storage import blob_store

    if request.param == "s3":
        server = request.getfixturevalue("s3_server")
        settings_env(**server.env(f"app-{uuid.uuid4().hex[:12]}"))
    blob_store.cache_clear()
    yield blob_store()
    blob_store.cache_clear()


def unfinished_uploads(store) -> list[dict]:
    """The multipart uploads under the store's prefix that were neither completed nor aborted."""
    return store.client.list_multipart_uploads(Bucket=store.bucket, Prefix=store.prefix).get("Uploads") or []
