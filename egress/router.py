"""Which shard owns each rid, which rids are live there, and which have ended.

The egress alone holds this table, so that when a shard dies it can fail exactly the
rids that shard owned, with the usage they had reached (protocol rule 5). The shard of a
rid is crc32 of its UTF-8 bytes modulo N: stable across runs and processes.

Rids repeat every step, so routing a frame is whole-column work in the steady state: one
`map(dict.get)` gives every row's owner, and Python runs per row only for a rid's first
and last rows. Completion tokens are not counted per row: the egress keeps the headers of
the frames its live rids' rows came in (a reference per frame) and counts a rid's ids
from them only when a shard dies and the rid must be failed with its usage.
"""

from __future__ import annotations

import zlib
from collections import Counter, deque
from collections.abc import Iterable
from itertools import chain, compress, repeat

from sglang_tok.protocols.model.batch import Batch
from sglang_tok.protocols.model.deltas import Delta, Usage, terminal
from sglang_tok.protocols.model.interface import LATE

NEVER = 1 << 62  # the first frame of a rid that is not live
# frames of headers kept while some live rid is older; beyond, the oldest is folded into
# per-rid counts (a per-row cost paid only while requests outlive this many frames)
LOG_FRAMES = 2048
# frames between two trims of the log: trimming costs a few microseconds, paid per frame
TRIM_EVERY = 8


def shard_of(rid: str, nshards: int) -> int:
    return zlib.crc32(rid.encode("utf-8")) % nshards


class Live:
    """A live rid as the egress sees it: owner, the frame of its first row, the usage
    fields of that row, and completion tokens already folded out of the frame log."""

    __slots__ = ("shard", "slot", "first", "last", "completion", "prompt", "cached",
                 "reasoning")

    def __init__(self, shard: int) -> None:
        self.shard = shard
        self.slot = -1  # its index in the shard's arrays, from its first row to its end
        self.first = -1  # no row yet
        self.last = NEVER  # the frame it ended in: later rows of its rid are late
        self.completion = self.prompt = self.cached = self.reasoning = 0

    def usage(self) -> Usage:
        return Usage(self.prompt, self.completion, self.prompt + self.completion, self.cached,
                     self.reasoning)


# the rids a message ends on one shard, each with its usage so far: done once the shard acks
# the message (its `Ledger`)
Endings = list[tuple[str, Live]]
# outputs a dead shard may have taken with it unsent: its socket queue (--link-capacity
# messages) plus what libzmq's engine holds in its 8 KiB batch (small messages: < 512)
ENGINE_BATCH_MESSAGES = 512


class Ledger:
    """One shard's endings that its death could still undo, oldest first.

    A shard acknowledges the messages it has processed, but their deltas may still wait
    in its output socket's queue (the frontend is behind), and die with it. So an ending
    stays here after its acknowledgement until the shard has sent `keep` more output
    messages than it had then: only then can its last delta no longer be in the queue.
    The acknowledgement carries the usage the shard counted for the rids it ended, so
    only unacknowledged endings keep frames in the router's log.
    """

    __slots__ = ("entries", "unacked", "acks", "mins", "keep", "gone")

    def __init__(self, keep: int) -> None:
        self.keep = keep
        # (message number, ended, oldest first frame), by message number
        self.entries: deque[tuple[int, Endings, int]] = deque()
        self.unacked: deque[tuple[int, Endings, int]] = deque()
        self.acks: deque[tuple[int, int]] = deque()  # (count, outputs sent then)
        self.mins: deque[tuple[int, int]] = deque()  # (number, first): unacked's minimum
        # rids whose endings left the window since `take_gone`: their death can undo nothing
        self.gone: list[str] = []

    def add(self, entry: tuple[int, Endings, int]) -> None:
        self.entries.append(entry)
        self.unacked.append(entry)
        n, _, first = entry
        mins = self.mins
        while mins and mins[-1][1] >= first:
            mins.pop()
        mins.append((n, first))

    def oldest(self) -> int:
        return self.mins[0][1] if self.mins else NEVER

    def ack(self, count: int, sent: int) -> Endings:
        """The endings newly acknowledged; those now past the window are forgotten."""
        done: Endings = []
        q, mins = self.unacked, self.mins
        while q and q[0][0] <= count:
            n, ended, _ = q.popleft()
            done.extend(ended)
            while mins and mins[0][0] <= n:
                mins.popleft()
        acks = self.acks
        if acks and acks[-1][1] == sent:  # no output since (PINGs): the later count covers
            acks[-1] = (count, sent)
        else:
            acks.append((count, sent))
        safe = -1
        while acks and acks[0][1] <= sent - self.keep:
            safe = acks.popleft()[0]
        entries, gone = self.entries, self.gone
        while entries and entries[0][0] <= safe:
            gone.extend(rid for rid, _ in entries.popleft()[1])
        return done

    def take_gone(self) -> list[str]:
        gone, self.gone = self.gone, []
        return gone

    def clear(self) -> None:
        for q in (self.entries, self.unacked, self.acks, self.mins):
            q.clear()
        self.gone = []


class SlotPool:
    """One shard's slots: the lowest free ones are reused first, so a shard's arrays stay
    as small as its peak of live requests."""

    __slots__ = ("free", "next")

    def __init__(self) -> None:
        self.free: list[int] = []
        self.next = 0

    def take(self) -> int:
        if self.free:
            return self.free.pop()
        slot = self.next
        self.next += 1
        return slot

    def give(self, slot: int) -> None:
        self.free.append(slot)

    def clear(self) -> None:
        self.free.clear()
        self.next = 0


class Router:
    """Live rids per shard, plus a ledger of rids whose last delta may not have left.

    A rid's last row ends it here when routed, but the shard may die before processing
    it, or before its deltas leave its socket queue: messages to each shard are numbered,
    the shard acknowledges what it processed and how many output messages it has sent,
    and a dead shard's endings that are unacknowledged, or acknowledged too recently to
    have left it, are failed along with its live rids (a frontend drops the error if the
    last delta did arrive: protocol section 5, rule 7).
    """

    def __init__(self, nshards: int, ended_memory: int = 1 << 20,
                 log_frames: int = LOG_FRAMES, output_queue: int = 1000) -> None:
        self.nshards = nshards
        self.live: dict[str, Live] = {}
        # every live rid that has had rows -> its route code: the one lookup a known rid's
        # row costs (live rids only: a small, hot table; an ended rid's late row misses it
        # and is found in `ended`, the remembered ended rids, oldest first)
        self.where: dict[str, int] = {}
        self.ended: dict[str, None] = {}
        self.ended_memory = ended_memory
        self.routed = [0] * nshards
        # just after an egress restart: rows of rids seen for the first time (and not
        # OPENed since) are not routed but collected here for Egress._fail_suspects
        self.quarantine = False
        self.suspects: list[str] = []
        self.ledgers = [Ledger(output_queue + ENGINE_BATCH_MESSAGES) for _ in range(nshards)]
        # the frame log: (frame number, rids, tok_lens) of every routed BATCH frame back to
        # the first row of the oldest rid that may still need its usage counted
        self.frames = 0
        self.log: deque[tuple[int, list[str], list[int]]] = deque()
        self.log_frames = log_frames
        self.firsts: dict[str, int] = {}  # live rids with rows, in first-row order
        self.folded: Counter[str] = Counter()  # ids of live rids' rows folded out of the log
        self.ending: dict[str, Live] = {}  # ended rids whose ending is not acknowledged
        self.opened: list[str] = []  # rids `route` saw first; the egress empties it
        # a rid's route code (`where`) is slot * nshards + shard: the slot is taken on
        # its first row and given back when it ends. A shard reads a slot's end before any
        # later message can name the slot again (one link, in order), and within a frame
        # slots are taken (first rows) before any is given back (last rows).
        self.pools = [SlotPool() for _ in range(nshards)]
        self.new_rows: list[tuple[int, str]] = []  # (row, rid) given a slot by `route`

    def owner(self, rid: str) -> int:
        st = self.live.get(rid)
        return st.shard if st is not None else shard_of(rid, self.nshards)

    def is_ended(self, rid: str) -> bool:
        return rid in self.ended

    def end(self, rid: str) -> Live | None:
        ended = self.ended
        ended[rid] = None
        self.where.pop(rid, None)
        if len(ended) > self.ended_memory:
            del ended[next(iter(ended))]
        st = self.live.pop(rid, None)
        if st is not None:
            if st.slot >= 0:
                self.pools[st.shard].give(st.slot)
                st.slot = -1
            st.last = self.frames
            self.firsts.pop(rid, None)
            st.completion += self.folded.pop(rid, 0)
        return st

    def open(self, rid: str) -> int:
        """OPEN: a live rid keeps its state; an ended one may be reused."""
        st = self.live.get(rid)
        if st is None:
            self.ended.pop(rid, None)  # its first row makes it routable again
            st = self.live[rid] = Live(shard_of(rid, self.nshards))
        return st.shard

    def route(self, batch: Batch, codes: list[int] | None = None,
              ends: list[int] | None = None) -> tuple[list[int], int, dict[int, Endings]]:
        """Route code per row (slot * nshards + shard; LATE: its rid has ended, no shard
        sees it), the frame's iteration tokens (new ids plus computed prompt tokens of
        first rows), and the rids each shard's part ends. `new_rows` then lists the rows
        whose rid took a slot in this frame. `codes` and `ends`: each row's route code
        (-1: none) and the rows with a finish, where the reader looked them up already
        (rows it found without a route, or LATE, are looked up again: the egress may have
        opened or ended their rids since). A row whose rid has no route and has ended is
        LATE."""
        h = batch.header
        rids, fins = h.rids, h.finish_reasons
        n = len(rids)
        self.frames += 1
        if codes is None:
            owner: list[int] = list(map(self.where.get, rids, repeat(-1)))
        else:
            owner = codes
            if LATE in owner:
                where = self.where
                i = -1
                while True:
                    try:
                        i = owner.index(LATE, i + 1)
                    except ValueError:
                        break
                    owner[i] = where.get(rids[i], -1)
        prompt_computed = self._first_rows(batch, owner) if -1 in owner else 0
        finished: dict[int, Endings] = {}
        if ends is None:
            ends = list(compress(range(n), fins)) if fins.count(None) != n else []
        for i in ends:
            self._last_row(rids, owner, i, finished)
        self.log.append((self.frames, rids, h.tok_lens))
        # trimmed every TRIM_EVERY frames (a frame kept longer only counts toward nothing:
        # `_count` and `_fold` look at each rid's own frames), or when the log is full;
        # the rids this frame ends are not in the ledger until dispatched: keep their rows
        if not self.frames % TRIM_EVERY or len(self.log) > self.log_frames:
            self._trim_log(min((st.first for ended in finished.values() for _, st in ended),
                               default=self.frames))
        return owner, batch.total_ids + prompt_computed, finished

    def _first_rows(self, batch: Batch, owner: list[int]) -> int:
        """Rows whose rid has no route yet: a new rid, an OPENed one, or a quarantined one."""
        h = batch.header
        rids, where, live, firsts = h.rids, self.where, self.live, self.firsts
        ended = self.ended
        prompt_computed = 0
        i = -1
        while True:
            try:
                i = owner.index(-1, i + 1)  # C-speed scan to the next unrouted row
            except ValueError:
                return prompt_computed
            rid = rids[i]
            k = where.get(rid)  # a rid new to this frame may have had its first row already
            if k is not None:
                owner[i] = k
                continue
            if rid in ended:  # a late row (or one after its request was failed)
                owner[i] = LATE
                continue
            st = live.get(rid)
            if st is None:
                if self.quarantine:
                    owner[i] = LATE
                    self.suspects.append(rid)
                    continue
                st = live[rid] = Live(zlib.crc32(rid.encode("utf-8")) % self.nshards)
                self.opened.append(rid)  # for the egress's journal; emptied per frame
            st.prompt, st.cached = h.prompt_tokens[i], h.cached_tokens[i]
            st.first = firsts[rid] = self.frames
            prompt_computed += max(0, st.prompt - st.cached)
            st.slot = self.pools[st.shard].take()
            owner[i] = where[rid] = st.slot * self.nshards + st.shard
            self.new_rows.append((i, rid))

    def _last_row(self, rids: list[str], owner: list[int], i: int,
                  finished: dict[int, Endings]) -> None:
        """A row with a finish ends its rid here. A later row of the same rid in the same
        frame (no scheduler sends one) still goes to the shard, which ignores it as late."""
        code = owner[i]
        if code == LATE:
            return
        k = code % self.nshards
        rid = rids[i]
        st = self.end(rid)
        if st is not None:
            finished.setdefault(k, []).append((rid, st))

    def _trim_log(self, oldest: int) -> None:
        """Forget frames older than every rid that may still be failed (and `oldest`);
        fold the oldest into counts when the log is too long."""
        log = self.log
        for rid in self.firsts:  # insertion order: the first is the oldest live rid
            oldest = min(oldest, self.firsts[rid])
            break
        for ledger in self.ledgers:
            oldest = min(oldest, ledger.oldest())
        while log and log[0][0] < oldest:
            log.popleft()
        while len(log) > self.log_frames:
            self._fold(*log.popleft())

    def _fold(self, frame: int, rids: list[str], lens: list[int]) -> None:
        """Count one frame's ids into the rids that may still need them, at C speed."""
        mine = list(map(frame.__ge__, map(self.firsts.get, rids, repeat(NEVER))))
        live_rids = compress(rids, mine)
        if lens.count(1) == len(lens):
            self.folded.update(live_rids)
        else:
            self.folded.update(chain.from_iterable(map(repeat, live_rids, compress(lens, mine))))
        ending = self.ending
        if ending:
            for i in compress(range(len(rids)), map(ending.__contains__, rids)):
                st = ending[rids[i]]
                if 0 <= st.first <= frame <= st.last:
                    st.completion += lens[i]

    def _count(self, targets: dict[str, Live]) -> None:
        """Completion tokens of these rids from the frame log (a shard died: rare)."""
        order = sorted((st.first, rid) for rid, st in targets.items() if st.first >= 0)
        counting: set[str] = set()
        k = 0
        for frame, rids, lens in self.log:
            while k < len(order) and order[k][0] <= frame:
                counting.add(order[k][1])
                k += 1
            if not counting:
                continue
            for i in compress(range(len(rids)), map(counting.__contains__, rids)):
                st = targets[rids[i]]
                if frame <= st.last:
                    st.completion += lens[i]

    def dispatched(self, shard: int, ended: Endings | None = None) -> None:
        """One more message went (or is queued) to a shard; `ended` rids end with it."""
        self.routed[shard] += 1
        if ended:
            self._ledger(shard, ended)

    def self_ended(self, shard: int, rids: list[str]) -> None:
        """Rids the shard ended on its own: their last delta is in its output already."""
        ended = [(rid, st) for rid in rids if (st := self.end(rid)) is not None]
        if ended:
            self._ledger(shard, ended)

    def _ledger(self, shard: int, ended: Endings) -> None:
        first = min((st.first for _, st in ended if st.first >= 0), default=NEVER)
        self.ledgers[shard].add((self.routed[shard], ended, first))
        for rid, st in ended:
            self.ending[rid] = st

    def acked(self, shard: int, count: int, sent: int,
              usage: Iterable[tuple[str, int, int]] = ()) -> list[str]:
        """The shard processed `count` messages, has sent `sent` output messages, and
        counted this (completion, reasoning) usage for the rids it ended meanwhile: the
        rids whose ending it has now acknowledged (for the journal)."""
        ending = self.ending
        for rid, completion, reasoning in usage:
            st = ending.get(rid)
            if st is not None:  # final: nothing left to count from the log
                st.completion, st.reasoning, st.first = completion, reasoning, -1
        done = self.ledgers[shard].ack(count, sent)
        for rid, st in done:  # the frame log keeps and folds their frames no more
            if ending.get(rid) is st:
                del ending[rid]
            st.first = -1  # without the shard's usage (a rid it held no state for): as is
        return [rid for rid, _ in done]

    def fail_shard(self, shard: int, message: str) -> list[Delta]:
        """Terminal error deltas for every rid a dead shard may not have finished."""
        targets: dict[str, Live] = {}
        for rid in [rid for rid, st in self.live.items() if st.shard == shard]:
            st = self.end(rid)
            assert st is not None  # it was live
            targets[rid] = st
        ledger = self.ledgers[shard]
        for _, ended, _ in reversed(ledger.entries):  # a rid's newest ending, if several
            for rid, st in ended:
                targets.setdefault(rid, st)  # a rid reused since keeps its live state
                if self.ending.get(rid) is st:
                    del self.ending[rid]
        self._count(targets)
        ledger.clear()
        self.routed[shard] = 0
        self.pools[shard].clear()  # its replacement starts with empty arrays
        return [terminal(rid, message, st.usage()) for rid, st in targets.items()]
