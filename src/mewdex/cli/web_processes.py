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
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

#: How often the supervisor looks at the web processes (seconds).
CHECK_SECONDS = 0.5


def serve_processes(count: int, state: Path, options: dict[str, Any]) -> bool:
    """Serve with ``count`` web processes until SIGTERM/SIGINT: this process runs the workers, the
    scheduler and the database's supervision (``runtime.start_server``, publishing the workers' status
    in ``state`` for ``/health`` and ``/metrics``) and :class:`WebProcesses` over uvicorn servers of
    ``mewdex.web.app:create_web_process_app`` (``options``: uvicorn's, ``host`` and ``port`` among
    them). Stopping: the web processes first (each finishes its requests), then the workers (they
    hand their tasks back). Returns False when a web process could not start (its error is in the
    log above)."""
    import uvicorn

    from mewdex.config import get_settings
    from mewdex.runtime import POOL_STATUS_FILE, check_connection_limit, start_server

    check_connection_limit()
    config = uvicorn.Config("mewdex.web.app:create_web_process_app", **options)
    sockets = [listening_socket(config.host, config.port) for _ in range(count)]
    server = start_server(get_settings().workers, publish=state / POOL_STATUS_FILE)
    try:
        return WebProcesses(config, sockets).run()
    finally:
        server.stop()
        for sock in sockets:
            sock.close()


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port`` with ``SO_REUSEPORT`` (the other web processes' sockets share
    the address; only processes of this user may join them), listening."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)  # uvicorn's backlog
    sock.set_inheritable(True)
    return sock


class WebProcesses:
    """One spawned process per socket of ``sockets``, each running a uvicorn server of ``config`` on its
    socket; until SIGTERM or SIGINT. A process that died is logged (how it ended) and started again on
    the same socket (connections the kernel queued there meanwhile wait for it); one that could not
    start (uvicorn's exit code 3: the app or its lifespan failed) stops them all. Stopping sends each
    SIGTERM and waits for it: uvicorn finishes the requests it is answering."""

    def __init__(self, config: Any, sockets: list[socket.socket]) -> None:
        self.config = config
        self.sockets = sockets
        self._context = multiprocessing.get_context("spawn")
        multiprocessing.allow_connection_pickling()  # the sockets travel to the spawned processes

    def _start(self, sock: socket.socket) -> Any:
        process = self._context.Process(target=run_web_process, args=(self.config, sock), name="mewdex-web")
        process.start()
        return process

    def run(self) -> bool:
        """Returns False when a web process could not start."""
        from uvicorn.config import STARTUP_FAILURE

        from mewdex.queue.worker import exit_reason

        stop: list[int] = []  # the handlers only append (see runtime.run_worker)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda signum, _frame: stop.append(signum))
        processes = [self._start(sock) for sock in self.sockets]
        failed = False
        while not stop:
            time.sleep(CHECK_SECONDS)
            for i, process in enumerate(processes):
                if stop or process.is_alive():
                    continue
                if process.exitcode == STARTUP_FAILURE:
                    log.error("web process %s could not start (see above); stopping", process.pid)
                    failed = True
                    stop.append(0)
                    break
                processes[i] = self._start(self.sockets[i])
                log.error(
                    "web process %s %s; started %s in its place",
                    process.pid,
                    exit_reason(process.exitcode),
                    processes[i].pid,
                )
        for process in processes:
            if process.is_alive():
                process.terminate()
        for process in processes:
            process.join()
        return not failed


def run_web_process(config: Any, sock: socket.socket) -> None:
    """A spawned web process: uvicorn's server of ``config`` on ``sock``. A start that failed ends with
    uvicorn's exit code 3 (its own ``sys.exit``, or here when it never started)."""
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE

    config.configure_logging()
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # a Ctrl-C in the terminal reaches every process of its group
        pass
    if not server.started:
        sys.exit(STARTUP_FAILURE)
