"""SGLang's pickled per-row columns (`time_stats`: one pickle of a list, a row's object per
item) cut into each row's bytes by reading the pickle's opcodes, never by unpickling it.

SGLang's scheduler pickles a message's `SchedulerReqTimeStats` list whole; its own router
unpickles it once per worker group and pickles each group's rows again (a Python
`__setstate__` and `__getstate__` per row and group). Yet the list's pickle is a run of
items of one shape: the first defines the class and, with `--enable-metrics`, the state's
keys in the memo; every later item refers to those by index and differs from the second
only in its number payloads (timestamps). So the column is read as

    prelude: the list's start, item 0
    items:   n - 1 equal-sized items after it (n - 1 == 0 for a one-row message)

and checked at C speed: every later item has the second's bytes outside the payloads of its
number opcodes (`BINFLOAT`, `BININT*`), and refers to no memo entry but item 0's. A part of
rows R is then `PROTO, EMPTY_LIST, item 0, POP, MARK, R's items, APPENDS, STOP`: item 0 is
replayed (and dropped) for its memo entries, every item of R keeps its meaning, and the
part unpickles to exactly `[whole[r] for r in R]`, which is what SGLang's own cut sends.

A pickle of another shape (several frames, an opcode not below, an item that refers to
another item's memo entries, items of different sizes) is not cut here (`items_of` returns
None): the caller falls back to the cut that unpickles (SGLang's own process tree only).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

PROTO, FRAME, STOP = 0x80, 0x95, ord(".")
EMPTY_LIST, MARK, APPENDS, APPEND, POP = ord("]"), ord("("), ord("e"), ord("a"), ord("0")
MEMOIZE, BINPUT, LONG_BINPUT = 0x94, ord("q"), ord("r")
BINGET, LONG_BINGET = ord("h"), ord("j")
BINFLOAT, BININT, BININT1, BININT2 = ord("G"), ord("J"), ord("K"), ord("M")
# opcodes with a fixed-size argument: (argument bytes, stack effect, entries it reads);
# effect -9 pops to the mark and pushes one (TUPLE, LIST, DICT), -8 pops to the mark and
# adds to the object below it (SETITEMS, APPENDS, ADDITEMS)
_FIXED: dict[int, tuple[int, int, int]] = {
    ord("N"): (0, 1, 0), 0x88: (0, 1, 0), 0x89: (0, 1, 0),  # NONE, NEWTRUE, NEWFALSE
    BININT: (4, 1, 0), BININT1: (1, 1, 0), BININT2: (2, 1, 0), BINFLOAT: (8, 1, 0),
    ord(")"): (0, 1, 0), ord("}"): (0, 1, 0), ord("]"): (0, 1, 0), 0x8F: (0, 1, 0),  # EMPTY_*
    0x93: (0, -1, 2), 0x81: (0, -1, 2), 0x92: (0, -2, 3), ord("R"): (0, -1, 2),  # ..REDUCE
    ord("b"): (0, -1, 2), ord("s"): (0, -2, 3), APPEND: (0, -1, 2), POP: (0, -1, 1),
    0x85: (0, 0, 1), 0x86: (0, -1, 2), 0x87: (0, -2, 3),  # TUPLE1-3
    ord("t"): (0, -9, 0), ord("l"): (0, -9, 0), ord("d"): (0, -9, 0), 0x91: (0, -9, 0),
    ord("u"): (0, -8, 0), APPENDS: (0, -8, 0), 0x90: (0, -8, 0),
    MEMOIZE: (0, 0, 1), BINPUT: (1, 0, 1), LONG_BINPUT: (4, 0, 1),
    BINGET: (1, 1, 0), LONG_BINGET: (4, 1, 0),
}
# opcodes followed by a length, then that many bytes (strings, bytes, big ints)
_SIZED: dict[int, int] = {0x8C: 1, ord("X"): 4, 0x8D: 8,  # SHORT_BINUNICODE, BINUNICODE(8)
                          ord("C"): 1, ord("B"): 4, 0x8E: 8,  # SHORT_BINBYTES, BINBYTES(8)
                          0x8A: 1, 0x8B: 4}  # LONG1, LONG4
# opcodes that change the object below what they read in place (it stays that object)
_IN_PLACE = frozenset((ord("b"), ord("s"), APPEND))
# opcodes whose argument is a number that may differ from row to row
_NUMBERS = frozenset((BINFLOAT, BININT, BININT1, BININT2))


def _step(data: bytes, at: int) -> tuple[int, int, int, int]:
    """The opcode at `at`: (opcode, where its argument starts, its size, the next opcode's
    offset). ValueError for an opcode this module does not read."""
    op = data[at]
    sized = _SIZED.get(op)
    if sized is not None:
        length = int.from_bytes(data[at + 1:at + 1 + sized], "little")
        return op, at + 1 + sized, length, at + 1 + sized + length
    if op == MARK:
        return op, at + 1, 0, at + 1
    fixed = _FIXED.get(op)
    if fixed is None:
        raise ValueError(f"pickle opcode {op:#x} is not cut here")
    return op, at + 1, fixed[0], at + 1 + fixed[0]


def _effect(op: int) -> tuple[int, int]:
    """(stack effect, entries the opcode reads)."""
    if op in _SIZED:
        return 1, 0
    _, effect, need = _FIXED[op]
    return effect, need


class Segment:
    """Bytes [start, end) of a pickle read as one object on their own: an item of the
    list. ValueError unless they push exactly one object without touching anything
    pushed before them (so that, placed anywhere in a list, they are one item)."""

    __slots__ = ("defined", "refs", "numbers", "top")

    def __init__(self, data: bytes, start: int, end: int, memo: int) -> None:
        self.refs: list[int] = []  # memo entries it reads
        self.numbers: list[tuple[int, int]] = []  # (offset, size) of number payloads
        # the memo entry that holds the object it builds (-1: none), so that the object
        # can be pushed again by a BINGET of it
        self.top = -1
        depth = 0
        marks: list[int] = []
        at = start
        while at < end:
            op, arg, size, at = _step(data, at)
            depth, memo = self._apply(data, op, arg, size, depth, marks, memo)
        if at != end or depth != 1 or marks:
            raise ValueError("not one object")
        self.defined = memo  # memo entries defined once it is read

    def _apply(self, data: bytes, op: int, arg: int, size: int, depth: int,
               marks: list[int], memo: int) -> tuple[int, int]:
        if op == MARK:
            marks.append(depth)
            return depth, memo
        effect, need = _effect(op)
        floor = marks[-1] if marks else 0  # nothing below it is the item's to read
        if depth - floor < need:
            raise ValueError("reads what was pushed before it")
        if op == MEMOIZE:
            if depth == 1 and not marks:
                self.top = memo
            return depth, memo + 1
        if op in (BINGET, LONG_BINGET):
            self.refs.append(int.from_bytes(data[arg:arg + size], "little"))
            if depth == 0:
                self.top = self.refs[-1]
        elif op in _NUMBERS:
            self.numbers.append((arg, size))
        if not marks and depth - need < 1 and op not in _IN_PLACE and need:
            self.top = -1  # the object is replaced by what the opcode makes of it
        if effect <= -8:  # to the mark: a container built from what was pushed after it
            if not marks:
                raise ValueError("pops a mark it did not push")
            depth = marks.pop() + (1 if effect == -9 else 0)
            if effect == -9 and depth == 1 and not marks:
                self.top = -1
        else:
            depth += effect
        if depth < (marks[-1] if marks else 0) or (effect == -8 and depth < 1):
            raise ValueError("reads what was pushed before it")
        return depth, memo


def _ends(data: bytes, start: int, memo: int, limit: int) -> Iterator[tuple[int, int]]:
    """(end, memo entries defined by then) of each prefix of the bytes from `start` that
    leaves one object pushed and no mark open, in order: the first item's end is one of
    them (read lazily: the caller stops at the first that holds)."""
    depth = 0
    marks: list[int] = []
    at = start
    seg = Segment.__new__(Segment)
    seg.refs, seg.numbers = [], []
    try:
        while at < limit:
            op, arg, size, at = _step(data, at)
            depth, memo = seg._apply(data, op, arg, size, depth, marks, memo)
            if depth == 1 and not marks and at < limit and data[at] != MEMOIZE:
                yield at, memo
    except ValueError:  # past the first item: what follows may read it (or the list)
        return


class Items:
    """A pickled list's rows as byte ranges of its pickle (`data`): row r's item is
    `data[starts[r]:starts[r] + sizes[r]]`. A part of rows R is `prelude` (the list's
    start, item 0 for its memo entries, POP, MARK), R's items, then `TAIL`."""

    __slots__ = ("prelude", "data", "starts", "sizes", "width")

    def __init__(self, prelude: bytes, data: bytes, starts: I64, sizes: I64,
                 width: int = 0) -> None:
        self.prelude = prelude
        self.data = data
        self.starts = starts
        self.sizes = sizes
        # width: `data` is every row's item laid end to end, each `width` bytes (row 0's a
        # BINGET of item 0's object, which the prelude built, padded with MEMOIZEs)
        self.width = width

    def part(self, rows: list[int]) -> bytes:
        """The pickle of `[whole[r] for r in rows]` (rows in any order, repeats allowed)."""
        data, w = self.data, self.width
        if w:
            return b"".join([self.prelude, *(data[r * w:(r + 1) * w] for r in rows), TAIL])
        starts, sizes = self.starts.tolist(), self.sizes.tolist()
        return b"".join([self.prelude, *(data[starts[r]:starts[r] + sizes[r]] for r in rows),
                         TAIL])


TAIL = bytes((APPENDS, STOP))
HEAD = bytes((PROTO, 4, EMPTY_LIST, MEMOIZE))


class Known:
    """The last pickle shape cut (SGLang's scheduler pickles every message's list alike):
    where its first item lies, its items' size, and which of their bytes are numbers'
    payloads. A message of that shape is cut without reading its opcodes again."""

    __slots__ = ("at", "size0", "size", "item0", "fixed0", "item1", "allowed", "again")

    def __init__(self, data: bytes, at: int, end0: int, size: int, first: Segment,
                 second: Segment) -> None:
        self.at, self.size0, self.size = at, end0 - at, size
        self.again = _again_item(first.top, size)  # row 0's item as a uniform row, or b""
        self.item0 = np.frombuffer(data, np.uint8, end0 - at, at).copy()
        self.fixed0 = ~_mask(end0 - at, at, first.numbers)
        self.item1 = np.frombuffer(data, np.uint8, size, end0).copy()
        self.allowed = _mask(size, end0, second.numbers)


def _mask(size: int, base: int, numbers: list[tuple[int, int]]) -> npt.NDArray[np.bool_]:
    """Which of an item's bytes are its numbers' payloads."""
    out = np.zeros(size, bool)
    for offset, length in numbers:
        out[offset - base:offset - base + length] = True
    return out


_known: Known | None = None


def items_of(data: bytes, n: int) -> Items | None:
    """The rows of a pickled list of `n` items, or None where its shape is not the one
    this module cuts (the caller then unpickles, or sends nil)."""
    if n < 2:
        return None
    try:
        at, body = _list_start(data, n)
        if at < 0:
            return None
        if _known is not None and _known.at == at:
            got = _again(data, n, body, _known)
            if got is not None:
                return got
        return _items(data, n, at, body)
    except (ValueError, IndexError):
        return None


def _list_start(data: bytes, n: int) -> tuple[int, int]:
    """(where the first item starts, where the last ends); -1 for a pickle of another
    shape than a list of n items in one frame."""
    at = 0
    if data[0] == PROTO:
        if data[1] < 4:
            return -1, 0  # protocols 2-3 memoize by index (BINPUT); SGLang pickles with 4-5
        at = 2
    if data[at] == FRAME:
        frame = _U64.unpack_from(data, at + 1)[0]
        at += 9
        if at + frame != len(data):
            return -1, 0  # several frames (over 64 KiB): a FRAME may split an item
    if data[at] != EMPTY_LIST or data[at + 1] != MEMOIZE or data[at + 2] != MARK:
        return -1, 0
    seps = 2 * ((n - 1) // 1000)  # APPENDS MARK between the pickler's batches of 1000
    body = len(data) - len(TAIL) - seps
    if data[body + seps:] != TAIL:
        return -1, 0
    return at + 3, body


def _again(data: bytes, n: int, body: int, known: Known) -> Items | None:
    """A pickle of the last shape: its first two items are the last's but for numbers."""
    at, size = known.at, known.size
    end0 = at + known.size0
    if body - end0 != (n - 1) * size:
        return None
    item0 = np.frombuffer(data, np.uint8, known.size0, at)
    item1 = np.frombuffer(data, np.uint8, size, end0)
    if not (item0[known.fixed0] == known.item0[known.fixed0]).all() or \
            ((item1 != known.item1) & ~known.allowed).any():
        return None
    return _uniform(data, n, at, end0, size, known.allowed, known.again)


def _again_item(top: int, size: int) -> bytes:
    """Item 0's object pushed again (a BINGET of its memo entry) in `size` bytes, padded
    with MEMOIZEs of it (each a memo entry nothing reads); b"" where that cannot be."""
    if top < 0:
        return b""
    get = bytes((BINGET, top)) if top < 256 else bytes((LONG_BINGET,)) + _U32.pack(top)
    return get + bytes((MEMOIZE,)) * (size - len(get)) if size >= len(get) else b""


def _items(data: bytes, n: int, at: int, body: int) -> Items | None:
    global _known
    for end0, memo in _ends(data, at, 1, body):  # memo entry 0 is the list
        size, left = divmod(body - end0, n - 1)
        if left or size <= 0:
            continue
        try:
            second = Segment(data, end0, end0 + size, memo)
        except ValueError:
            continue
        if any(ref == 0 or ref >= memo for ref in second.refs):
            continue  # an item that reads another item's memo entries is not cut by rows
        allowed = _mask(size, end0, second.numbers)
        first = Segment(data, at, end0, 1)
        items = _uniform(data, n, at, end0, size, allowed, _again_item(first.top, size))
        if items is not None:
            _known = Known(data, at, end0, size, first, second)
            return items
    return None


def _uniform(data: bytes, n: int, at: int, end0: int, size: int,
             allowed: npt.NDArray[np.bool_], again: bytes = b"") -> Items | None:
    """Every item after the first is the second's bytes but for its numbers' payloads."""
    k = np.arange(n - 1, dtype=np.int64)
    if n <= 1000:  # one batch: the items are one run of bytes
        starts = end0 + k * size
        run = data[end0:end0 + (n - 1) * size]
        if not allowed.any():
            if run != run[:size] * (n - 1):
                return None
        else:
            rows = np.frombuffer(run, np.uint8).reshape(n - 1, size)
            if ((rows != rows[0]) & ~allowed).any():
                return None
    else:
        batch = (k + 1) // 1000  # item k + 1's batch of 1000 (item 0 is in the first)
        starts = end0 + k * size + 2 * batch
        raw = np.frombuffer(data, np.uint8)
        seps = starts[np.flatnonzero(np.diff(batch)) + 1] - 2
        if not ((raw[seps] == APPENDS) & (raw[seps + 1] == MARK)).all():
            return None
        rows = raw[starts[:, None] + np.arange(size)]
        if ((rows != rows[0]) & ~allowed).any():
            return None
    prelude = HEAD + data[at:end0] + bytes((POP, MARK))
    if again and n <= 1000:  # every row `size` bytes: row 0 pushes item 0's object again
        return Items(prelude, again + data[end0:end0 + (n - 1) * size], _NONE, _NONE, size)
    all_starts = np.empty(n, np.int64)
    all_starts[0] = at
    all_starts[1:] = starts
    sizes = np.full(n, size, np.int64)
    sizes[0] = end0 - at
    return Items(prelude, data, all_starts, sizes)


_NONE = np.zeros(0, np.int64)
