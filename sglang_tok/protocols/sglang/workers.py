"""Each live request's tokenizer worker, one map the SGLang reader and writer share.

With `--tokenizer-worker-num` > 1 SGLang's router sends a reply row to the worker its
`http_worker_ipcs` entry names and takes no row without one. The scheduler's rows carry
the entry; the service's own last rows (a terminal error, a dead shard's or egress's
requests) do not, so the worker seen on a request's first row is kept here until its
last. The reader fills it as messages come in; the writer and the egress's journal read
it; a shard told to end rids (DROP) is told their workers with them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


class WorkerMap:
    """rid -> the tokenizer worker's ipc name, for live requests that have one."""

    __slots__ = ("ipc_of",)

    def __init__(self) -> None:
        self.ipc_of: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self.ipc_of)

    def note(self, rids: Sequence[str], ipcs: Sequence[str | None]) -> None:
        """Where these rids' rows go (a request's first row, a DROP, a replayed journal, a
        shard's rows): the newest word wins, as a rid reused by a new request may come
        from another worker while its old life's end is not yet certain."""
        ipc_of = self.ipc_of
        for rid, ipc in zip(rids, ipcs):
            if ipc is not None:
                ipc_of[rid] = ipc

    def ended(self, rids: Iterable[str]) -> None:
        """These requests are over: nothing more goes to their workers."""
        pop = self.ipc_of.pop
        for rid in rids:
            pop(rid, None)

    def of(self, rids: Sequence[str]) -> list[str | None]:
        """The worker of each rid ([] when none is kept: a server without workers)."""
        ipc_of = self.ipc_of
        return [ipc_of.get(rid) for rid in rids] if ipc_of else []

    def route(self, rid: str, last: bool) -> str | None:
        """Where a row of the service's goes; a last row forgets the request."""
        return self.ipc_of.pop(rid, None) if last else self.ipc_of.get(rid)
