"""`sglang-tok serve`: the detokenizer's processes (the egress, the shards, the HTTP
process, the encode service), wired for the arbiter (sglang_tok/serving/arbiter.py).

`Service` is the detokenizer's side: the `Child` specs of its processes and their order,
its notices to the egress (a shard died, drain), the restart metric and the ready report.
`serve(cfg)` checks the config and the tokenizer before anything starts, then runs them.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import zmq

from egress.journal import FILENAME as JOURNAL
from ring import link
from ring.sockets import make_socket
from sglang_tok import endpoints
from sglang_tok.config import Config, check_binds, discard, finalize, refused
from sglang_tok.process import Status, plan_cores, service_roles, shards_text
from sglang_tok.protocols.registry import check as check_protocol
from sglang_tok.tokenizer import TokenizerLoadError, load_tokenizer

from .arbiter import Child, Restart, Supervisor, Timeouts

log = logging.getLogger("sglang_tok.supervisor")  # the arbiter's: one voice in the log
TITLE = "sglang-tok"


class Service:
    """The detokenizer's processes as `Child` specs, and what their lives mean to it."""

    def __init__(self, cfg: Config) -> None:
        from sglang_tok.metrics import Metrics
        self.cfg = cfg
        self.status = Status(len(service_roles(cfg.shards, cfg.encode_workers)))
        self.metrics = Metrics()
        self.ready_reported = False
        self.http_port = 0
        self.zctx = zmq.Context(io_threads=1)
        self.notices = make_socket(self.zctx, zmq.PUSH, cfg.ipc("egress-ctl.ipc"), bind=False,
                                   hwm=1000, linger_ms=1000)

    def children(self) -> list[Child]:
        from egress.main import main as egress_main
        from shards.main import main as shard_main

        from .http import main as http_main
        cfg, st, me = self.cfg, self.status, os.getpid()
        shard_cores, egress_core, why = plan_cores(cfg.shards, cfg.pin, cfg.pin_cores,
                                                   cfg.inline_shard)
        if why:
            log.warning(why)
        roles = service_roles(cfg.shards)
        again = Restart(cfg.restart_limit, cfg.restart_window)
        egress = Child(roles[0], 0, egress_main, (cfg, st, egress_core, False), holds_data=True,
                       restart=again, args_on_restart=(cfg, st, egress_core, True),
                       on_death=_mark_dead)
        shards = [Child(roles[1 + k], 1 + k, shard_main, (cfg, st, k, shard_cores[k], me),
                        holds_data=True, restart=again, on_death=self._shard_death(k),
                        args_on_restart=(cfg, st, k, shard_cores[k], me, True))
                  for k in range(cfg.shards)] if not cfg.inline_shard else []
        http = Child(roles[cfg.shards + 1], cfg.shards + 1, http_main, (cfg, st, me),
                     holds_data=False, restart=again, on_death=_mark_dead)
        return [egress, *shards, http, *self._encode_children(again)]

    def _encode_children(self, again: Restart) -> list[Child]:
        """The encode service's broker and workers (none while --encode-workers is 0). They
        finish the requests they hold when `status.draining` is set, so they are drained
        like the data holders."""
        from sglang_tok.encoders.children import children
        return [Child(role, slot, target, args, holds_data=True, restart=again,
                      on_death=_mark_dead)
                for role, slot, target, args in children(self.cfg, self.status, os.getpid())]

    def timeouts(self) -> Timeouts:
        c = self.cfg
        return Timeouts(heartbeat=c.heartbeat_timeout, boot=c.boot_timeout, drain=c.drain_timeout)

    def _shard_death(self, k: int) -> Callable[[int], None]:
        def died(pid: int) -> None:
            _mark_dead(pid)
            self.notices.send(link.notice_encoder.encode(link.ShardDown(k, pid)))
        return died

    def drain(self, deadline: float) -> None:
        """Tell the egress to stop reading the ring and let what it read out by `deadline`."""
        self.status.draining = True
        self.notices.send(link.notice_encoder.encode(link.Drain(deadline)))

    def count_restart(self, child: Child) -> None:
        self.metrics.restarts.labels(child.role.split()[0]).inc()

    def report_ready(self) -> None:
        """Log `ready` once every process beats and HTTP is bound; keep the port file true."""
        st = self.status
        port = st.http_port
        if self.ready_reported and port != self.http_port:  # a restarted HTTP process
            self.http_port = port
            self._write_port(port)
            log.info("http now listening on %s:%d", self.cfg.http_host, port)
        if self.ready_reported or not st.egress_ready or port == 0:
            return
        if not all(st.beat(slot) > 0 for slot in range(st.slots)):
            return
        self.ready_reported = True
        self.http_port = port
        self._write_port(port)
        log.info("ready: %s; input %s; output %s; http %s:%d", shards_text(self.cfg.shards),
                 self.cfg.input, self.cfg.output, self.cfg.http_host, port)

    def _write_port(self, port: int) -> None:
        """Atomically: a reader never sees a half-written file."""
        tmp = Path(self.cfg.runtime_dir, "http.port.tmp")
        tmp.write_text(str(port))
        tmp.replace(Path(self.cfg.runtime_dir, "http.port"))

    def close(self) -> None:
        """Leave no socket, no socket file, metric file or port file behind."""
        self.notices.close(linger=0)
        self.zctx.term()
        rt = Path(self.cfg.runtime_dir)
        journal = rt / JOURNAL  # left by an egress that died
        for path in [*rt.glob("*.ipc"), rt / "http.port", journal, journal.with_suffix(".tmp")]:
            path.unlink(missing_ok=True)
        for bound in (self.cfg.input, self.cfg.encode):  # libzmq leaves socket files
            if bound.startswith("ipc://"):
                endpoints.remove_stale(bound[len("ipc://"):])
        shutil.rmtree(rt / "metrics", ignore_errors=True)


def _mark_dead(pid: int) -> None:
    from prometheus_client import multiprocess
    multiprocess.mark_process_dead(pid)


def serve(cfg: Config) -> int:
    """Run the service until it stops; ConfigError (nothing was started, nothing is left
    on disk) when a flag's value cannot work."""
    logging.basicConfig(level=cfg.log_level,
                        format="%(asctime)s sglang-tok supervisor %(levelname)s %(message)s",
                        stream=sys.stderr)
    made: list[Path] = []
    runtime = cfg.runtime_dir
    try:
        cfg = finalize(cfg, made)
        runtime = cfg.runtime_dir
        check_protocol(cfg)
        try:
            load_tokenizer(cfg.tokenizer)  # fail fast and clearly, before any child starts
        except TokenizerLoadError as exc:
            raise refused("tokenizer", str(exc), cfg.tokenizer) from None
        check_binds(cfg)
        return _run(cfg, lambda: discard(made, runtime))
    finally:
        discard(made, runtime)


def _run(cfg: Config, on_forced_exit: Callable[[], None]) -> int:
    metrics_dir = Path(cfg.runtime_dir, "metrics")
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(mode=0o700)
    # prometheus-client picks its multiprocess mode from this at import; children inherit it
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    import setproctitle
    setproctitle.setproctitle(f"{TITLE}: supervisor")
    service = Service(cfg)
    try:
        return Supervisor(service.children(), service.status, service.timeouts(),
                          drain=service.drain, tick=service.report_ready,
                          on_restart=service.count_restart, title=TITLE,
                          parent=os.getppid() if cfg.exit_with_parent else None,
                          on_forced_exit=on_forced_exit).run()
    finally:
        service.close()
