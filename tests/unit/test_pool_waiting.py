"""The pool's ``waiting`` count (``mewdex_db_pool_waiting``) counts threads that wait for a connection
because every one is out, not threads that take an idle one or open a new one."""

from __future__ import annotations

import threading

from sqlalchemy import create_engine, event

from conftest import wait_until
from mewdex.db.engine import WaitCountingPool


def test_only_a_thread_that_finds_every_connection_out_is_counted(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'pool.db'}", poolclass=WaitCountingPool, pool_size=1, max_overflow=0)
    pool = engine.pool
    assert isinstance(pool, WaitCountingPool)
    connecting, proceed = threading.Event(), threading.Event()

    @event.listens_for(engine, "connect")
    def slow_connect(*_args) -> None:  # a connect that takes its time is no wait
        connecting.set()
        proceed.wait(10)

    opener = threading.Thread(target=lambda: engine.connect().close())
    opener.start()
    assert connecting.wait(10)
    assert pool.waiting == 0
    proceed.set()
    opener.join(10)

    held = engine.connect()  # the pool's only connection: the next thread waits
    got = threading.Event()
    waiter = threading.Thread(target=lambda: (engine.connect().close(), got.set()))
    waiter.start()
    wait_until(lambda: pool.waiting == 1, 10, 0.01, "the second thread to wait")
    assert not got.is_set()
    held.close()
    assert got.wait(10)
    waiter.join(10)
    assert pool.waiting == 0
    engine.dispose()
