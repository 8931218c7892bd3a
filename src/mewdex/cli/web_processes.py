"""``mewdex serve`` with several web processes (``MEWDEX_WEB_PROCESSES`` > 1): this process runs what a
server runs once and supervises the web processes, each answering on a listening socket of its own.

Why not uvicorn's own ``workers=N``: it hands every process the one listening socket, and asyncio
accepts every connection waiting on it at each wake-up, so whichever process woke first took a whole
burst of new connections (and kept them: keep-alive). In a run of ``bench/load.py`` one of two
processes did 83 % of the work (45 of 54 CPU-seconds). Here each process gets a socket of its own,
bound to the same address with ``SO_REUSEPORT``: the kernel spreads new connections over them by
their addresses and ports (33 and 30 CPU-seconds in the next run).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: How often the supervisor looks at the web processes (seconds).
CHECK_SECONDS = 0.5
#: A web process that died is started again after this many seconds for each other death within
#: :data:`DEATH_WINDOW_SECONDS` (the first at once).
RESTART_BACKOFF_SECONDS = 1.0
#: This many deaths of web processes within :data:`DEATH_WINDOW_SECONDS` stop ``serve``: a crash loop.
MAX_DEATHS = 5
DEATH_WINDOW_SECONDS = 60.0


def serve_processes(sockets: list[socket.socket], state: Path, options: dict[str, Any]) -> bool:
    """Serve with one web process per socket of ``sockets`` (:func:`listening_sockets`) until
    SIGTERM/SIGINT: this process runs the workers, the scheduler and the database's supervision
    (``runtime.start_server``, publishing the workers' status in ``state`` for ``/health`` and
    ``/metrics``) and :class:`WebProcesses` over uvicorn servers of
    ``mewdex.web.app:create_web_process_app`` (``options``: uvicorn's). Stopping: the web processes
    first (each finishes its requests), then the workers (they hand their tasks back). Returns False
    when a web process could not start or they kept dying (the reason is in the log above)."""
    import uvicorn

    from mewdex.config import get_settings
    from mewdex.runtime import POOL_STATUS_FILE, check_connection_limit, start_server

    check_connection_limit()
    # proxy_headers off, as for one process (cli/server.py): the app decides the client address.
    config = uvicorn.Config("mewdex.web.app:create_web_process_app", proxy_headers=False, **options)
    server = start_server(get_settings().workers, publish=state / POOL_STATUS_FILE)
    try:
        return WebProcesses(config, sockets).run()
    finally:
        server.stop()


def listening_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """``count`` sockets bound to ``host``:``port`` with ``SO_REUSEPORT`` (they share the address;
    only processes of this user may join them), listening. Raises OSError when the address cannot be
    bound (in use, not this machine's), with none left open."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            sock.listen(2048)  # uvicorn's backlog
            sock.set_inheritable(True)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class WebProcesses:
    """One spawned process per socket of ``sockets``, each running a uvicorn server of ``config`` on its
    socket; until SIGTERM or SIGINT. A process that died is logged (how it ended) and started again on
    the same socket (connections the kernel queued there meanwhile wait for it), at once the first
    time, then :data:`RESTART_BACKOFF_SECONDS` later for each other death within a minute. One that
    could not start (exit code 3: its app, its import or its lifespan failed), or
    :data:`MAX_DEATHS` deaths within :data:`DEATH_WINDOW_SECONDS`, stop them all. Stopping sends each
    SIGTERM and waits for it: uvicorn finishes the requests it is answering."""

    def __init__(self, config: Any, sockets: list[socket.socket]) -> None:
        self.config = config
        self.sockets = sockets
        self._context = multiprocessing.get_context("spawn")
        multiprocessing.allow_connection_pickling()  # the sockets travel to the spawned processes

    def _start(self, sock: socket.socket) -> Any:
        process = self._context.Process(
            target=run_web_process, args=(self.config, sock, os.getpid()), name="mewdex-web"
        )
        process.start()
        return process

    def run(self) -> bool:
        """Returns False when a web process could not start or they kept dying."""
        from mewdex.queue.worker import exit_reason

        stop: list[int] = []  # the handlers only append (see runtime.run_worker)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda signum, _frame: stop.append(signum))
        processes: list[Any] = []
        restart_at: dict[int, float] = {}  # slot of a process that died: when to start another there
        deaths: deque[float] = deque()
        failed = False
        try:
            processes.extend(self._start(sock) for sock in self.sockets)
            while not stop and not failed:
                time.sleep(CHECK_SECONDS)
                now = time.monotonic()
                for i, process in enumerate(processes):
                    if stop or failed:
                        break
                    if i not in restart_at:
                        if process.is_alive():
                            continue
                        failed = self._stops_all(process, deaths, now)
                        restart_at[i] = now + RESTART_BACKOFF_SECONDS * (len(deaths) - 1)
                    if not failed and now >= restart_at[i]:
                        del restart_at[i]
                        processes[i] = self._start(self.sockets[i])
                        log.error(
                            "web process %s %s; started %s in its place",
                            process.pid,
                            exit_reason(process.exitcode),
                            processes[i].pid,
                        )
        finally:  # whatever ended the loop (an exception too): no web process outlives it
            for process in processes:
                if process.is_alive():
                    process.terminate()
            for process in processes:
                process.join()
        return not failed

    @staticmethod
    def _stops_all(process: Any, deaths: deque[float], now: float) -> bool:
        """Whether ``process``, dead, stops them all (logged): it could not start, or it is the
        :data:`MAX_DEATHS`-th death within :data:`DEATH_WINDOW_SECONDS` (``deaths``, their times)."""
        from uvicorn.config import STARTUP_FAILURE

        from mewdex.queue.worker import exit_reason

        if process.exitcode == STARTUP_FAILURE:
            log.error("web process %s could not start (see above); stopping", process.pid)
            return True
        deaths.append(now)
        while deaths[0] < now - DEATH_WINDOW_SECONDS:
            deaths.popleft()
        if len(deaths) < MAX_DEATHS:
            return False
        log.error(
            "web processes died %d times within %.0f s (the last, %s, %s); stopping",
            len(deaths),
            DEATH_WINDOW_SECONDS,
            process.pid,
            exit_reason(process.exitcode),
        )
        return True


def run_web_process(config: Any, sock: socket.socket, parent_pid: int) -> None:
    """A spawned web process of ``serve`` ``parent_pid``: uvicorn's server of ``config`` on ``sock``.
    It gets SIGTERM when that parent dies (and ends at once when it is gone already). Whatever ends it
    before its server started (an import error, the app factory's exception, a failed lifespan) ends
    it with uvicorn's exit code 3 (:data:`uvicorn.config.STARTUP_FAILURE`): the parent stops instead
    of starting it again."""
    from mewdex.queue.worker import die_with_parent

    die_with_parent(parent_pid)  # first: the app's imports below take seconds
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE

    server = None
    try:
        config.configure_logging()
        server = uvicorn.Server(config)
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # a Ctrl-C in the terminal reaches every process of its group
        pass
    except BaseException as exc:
        if server is not None and server.started:
            raise
        if not isinstance(exc, SystemExit):  # uvicorn's own exit logged why
            log.exception("web process %s could not start", os.getpid())
        sys.exit(STARTUP_FAILURE)
    if server is None or not server.started:
        sys.exit(STARTUP_FAILURE)
