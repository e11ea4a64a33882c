"""`pythonic` (Llama 4): a Python list of calls, `[f(a=1, b="x"), g()]`, read as Python.

The list stands optionally inside
`<|python_start|>` ... `<|python_end|>` (markup, dropped around delivered calls). Any `[`
in the content may open one: it is a call list only if an identifier and `(` follow, and
the list ends at its closing `]` (brackets counted outside Python strings). Each call is
parsed by Python's `ast` once its `)` arrives; keyword arguments only, values Python
literals (`ast.literal_eval`), converted to JSON as `json.dumps` writes them
(`ensure_ascii` off; tuples become arrays). Anything else (positional arguments, names,
sets, bytes, NaN) makes the list malformed, so it is text. Incremental: a keyword's plain
string value streams as it is generated (each escape once complete), another value leaves
when it ends, and the call's whole parse at `)` must extend what was sent (else the call
is flagged malformed); the closing brace leaves when the next call starts or the list
ends. Both modes give the same bytes. Comments and line continuations stand wherever
Python allows them once the list has opened, in both modes (the bracket scan skips
comments; the reader skips them where it skips blanks).
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Callable
from keyword import iskeyword
from typing import Any
from unicodedata import normalize

from .json_readers import ends_escaped
from .jsonio import dumps_finite, escape, json_string
from .readers import Call, Calls, Event, Opened
from .schema import Schemas
from .tool_format import ToolFormat

PY_SECTION = ("<|python_start|>", "<|python_end|>")

# a (dotted) name and `(`; Python allows whitespace around the dots inside brackets
_HEAD = re.compile(r"\s*([A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*)\s*\(")
_HEAD_PREFIX = re.compile(r"\s*(?:[A-Za-z_]\w*(?:\s*\.\s*(?:[A-Za-z_]\w*)?)*\s*)?")
_SPACE = re.compile(r"\s+")
_PY_STRUCT = re.compile(r"[\[\](){}'\"\\#]")
_PY_STRUCT_COMMA = re.compile(r"[\[\](){}'\"\\#,]")
_OPENERS = "([{"
# a comment runs from `#` (outside a string) to the line's end, `\n` or `\r` (Python's
# tokenizer ends a line at either); a `#` inside a string is the string's
_EOL = re.compile(r"[\n\r]")
COMMENT = "#"  # `PyScan.quote` while inside a comment
# what Python allows between two tokens inside brackets: blanks, complete comments and
# line continuations (`ast` still judges the blanks: a form feed passes, U+3000 does not)
_G = r"(?:\s|#[^\n\r]*+[\n\r]|\\[\n\r])*+"
_GAP_PY = re.compile(_G)
_NAME = r"[^\W\d]\w*"  # a Python identifier, non-ASCII too (NFKC-normalized, as Python does)
# a later call's head (the list's first is `_HEAD`, ASCII): its name, gaps allowed between
# tokens
_CALL_HEAD = re.compile(rf"{_G}({_NAME}(?:{_G}\.{_G}{_NAME})*){_G}\(")
_CALL_HEAD_PREFIX = re.compile(
    rf"{_G}(?:{_NAME}(?:{_G}\.{_G}(?:{_NAME})?)*{_G})?(?:#[^\n\r]*|\\)?")
_NOT_NAME = re.compile(r"\s+|#[^\n\r]*[\n\r]|\\[\n\r]")


class PyScan:
    """Resumable bracket depth of Python source, outside string literals and comments
    (`quote` is the open string's quote, or `COMMENT` inside a comment). `esc`: the scan
    stopped right after a backslash, so the character at `pos`, when it arrives, is
    escaped (a tokenizer often cuts `\\n` between its two characters; held at the
    backslash instead, the scan sent the next piece the engine's slow way)."""

    __slots__ = ("depth", "esc", "pos", "quote")

    def __init__(self, pos: int, depth: int) -> None:
        self.pos = pos
        self.depth = depth
        self.quote = ""
        self.esc = False

    def close(self, text: str, n: int, comma: bool = False) -> int:
        """Index of the closer that brings the depth to 0 in text[pos:n] (or, with
        `comma`, of a comma at depth 1), or -1."""
        i = self.pos
        if self.esc or self.quote == COMMENT:
            i = self._resume(text, n)
            if i < 0:
                return -1
        # the state in locals while the loop runs (once per piece inside a list)
        quote, depth, found = self.quote, self.depth, -1
        search = (_PY_STRUCT_COMMA if comma else _PY_STRUCT).search
        while True:
            m = search(text, i, n)
            if m is None:
                i = n
                break
            j = m.start()
            c = text[j]
            if c == "\\":
                if j + 1 >= n:  # the escaped character has not arrived yet
                    self.esc = True
                    i = n
                    break
                i = j + 2
                continue
            i = j + 1
            if quote:
                if c == quote:
                    quote = ""
            elif c in "'\"":
                quote = c
            elif c == "#":
                m = _EOL.search(text, i, n)
                if m is None:
                    quote = COMMENT
                    i = n
                    break
                i = m.end()
            elif c == ",":
                if depth == 1:
                    found = j
                    break
            elif c in _OPENERS:
                depth += 1
            else:
                depth -= 1
                if depth <= 0:
                    found = j
                    break
        self.quote, self.depth, self.pos = quote, depth, i
        return found

    def _resume(self, text: str, n: int) -> int:
        """Where `close` goes on when the scan stopped after a backslash (past the escaped
        character) or inside a comment (past its line's end): -1 while that has not
        arrived. Out of `close`'s way, which most pieces take without either."""
        i = self.pos
        if self.esc:  # (never in a comment) the character at `pos` is escaped
            if i >= n:
                return -1
            self.esc = False
            return i + 1
        m = _EOL.search(text, i, n)
        if m is None:
            self.pos = n
            return -1
        self.quote = ""
        return m.end()

    def skip(self, at: int, text: str) -> bool:
        """`close` (without `comma`) for a piece appended at `at`, when the scan has
        reached `at` and the depth does not come to 0 in the piece: the scan moves past
        it, having read only the piece (not the body). False, state unchanged: not such
        a piece (`close` decides): the scan is behind `at`, or the list or call closes in
        it."""
        if self.pos != at:
            return False
        n = len(text)
        if not n:
            return True
        quote = self.quote
        if quote:
            if quote == COMMENT:  # a comment's piece: taken whole unless its line ends
                if "\n" in text or "\r" in text:
                    return False
                self.pos = at + n
                return True
            if quote not in text:  # all string: the common piece, or one with escapes
                self.pos = at + n
                # (without a backslash, an escaped first character is an ordinary one)
                self.esc = "\\" in text and ends_escaped(text, self.esc)
                return True
        elif _PY_STRUCT.search(text) is None:
            self.pos = at + n
            self.esc = False
            return True
        # `close` over the piece alone (its positions the piece's), undone if it closes
        depth, esc = self.depth, self.esc
        self.pos = 0
        if self.close(text, n) >= 0:
            self.pos, self.quote, self.depth, self.esc = at, quote, depth, esc
            return False
        self.pos += at
        return True


class ListEnd:
    """The call list (after `[`) ends at its closing `]`; it must start `name(`, else it
    ends (malformed) at the first character that rules that out."""

    __slots__ = ("scan",)

    def __init__(self) -> None:
        self.scan: PyScan | None = None

    def end(self, body: str) -> tuple[int, int]:
        if self.scan is None:
            m = _HEAD.match(body)
            if m is None:
                e = _HEAD_PREFIX.match(body).end()  # type: ignore[union-attr]
                return (-1, -1) if e == len(body) else (e, e)
            self.scan = PyScan(m.end(), 2)  # inside the list and the first call
        at = self.scan.close(body, len(body))
        if at < 0:
            return -1, -1
        # closed by `)` or `}`: not a list, the closer stays in the (malformed) body
        return (at, at + 1) if body[at] == "]" else (at + 1, at + 1)

    def skip(self, at: int, text: str) -> bool:
        """`PyScan.skip`, once the list's first call has started."""
        return self.scan is not None and self.scan.skip(at, text)

    def skip_now(self) -> Callable[[int, str], bool] | None:
        """`skip` until the next `end`: the scan's own, once the first call started."""
        return None if self.scan is None else self.scan.skip


def _func_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _func_name(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _call_json(node: ast.expr) -> Call | None:
    if not isinstance(node, ast.Call) or node.args:
        return None
    name = _func_name(node.func)
    if name is None:
        return None
    args: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None or kw.arg in args:
            # **kwargs; a repeated keyword, which `ast.parse` lets through but Python's
            # compiler rejects (and a streamed first value cannot be taken back)
            return None
        value = kw.value  # a constant is its own value (what literal_eval returns for it)
        args[kw.arg] = value.value if value.__class__ is ast.Constant \
            else ast.literal_eval(value)  # type: ignore[attr-defined]
    return Call(name, dumps_finite(args))


def _parse(source: str) -> ast.expr | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes such as "\d" still parse
            return ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def parse_call(source: str) -> Call | None:
    """One `name(k=v, ...)` -> its call, or None (inside brackets, as in
    its list, so newlines may separate its tokens)."""
    node = _parse("(" + source + ")")
    try:
        return None if node is None else _call_json(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def parse_pythonic(body: str) -> Calls | None:
    """The list's inside (without its brackets) -> calls, or None."""
    node = _parse("[" + body + "]")
    if not isinstance(node, ast.List) or not node.elts:
        return None
    calls: Calls = []
    for elt in node.elts:
        try:
            call = _call_json(elt)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
        if call is None:
            return None
        calls.append(call)
    return calls


_KW = re.compile(r"([A-Za-z_]\w*)\s*=\s*")
_KW_PREFIX = re.compile(r"[A-Za-z_]\w*\s*(?:=\s*)?")
_IN_STR = {q: re.compile("[\\\\\n" + q + "]") for q in "'\""}
_OCTAL = "01234567"
# escapes whose value is fixed, without `ast` (a compile per escape)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"',
                   "a": "\a", "b": "\b", "f": "\f", "v": "\v"}
_ESCAPE_LEN = {"x": 2, "u": 4, "U": 8}

HEAD, KW, STR, STR_END, OTHER, REST, AFTER, BAD = range(8)
_GAP = re.compile(r"[ \t\n,]*")
_SKELETON = re.compile(r"[ -~\t\n]*")  # printable ASCII, tabs and newlines


# values common enough to skip `ast` (a compile per value): a decimal int of at most 18
# digits (no leading zero, so always valid Python; `int` reads it exactly), True, False, None
_SIMPLE_INT = re.compile(r"[ \t\n]*-?(?:0|[1-9][0-9]{0,17})[ \t\n]*")
_SIMPLE_CONST = {"True": "true", "False": "false", "None": "null"}


def _literal_json(source: str) -> str:
    """A keyword's value (its source, without the parentheses `ast` gets it in) as JSON."""
    if _SIMPLE_INT.fullmatch(source) is not None:
        return str(int(source))
    const = _SIMPLE_CONST.get(source.strip(" \t\n"))
    if const is not None:
        return const
    if _GAP_PY.fullmatch(source) is not None:  # no value (`a=)`): `()` would be a tuple
        raise ValueError("no value")
    value = ast.literal_eval("(" + source + ")")
    return dumps_finite(value)


_HEX = frozenset("0123456789abcdefABCDEF")


def _simple_escape(s: str, j: int) -> tuple[str, int] | None:
    """The escape at s[j] (a backslash, its character at j + 1) when its value is fixed
    or a complete `\\x`, `\\u` or `\\U` code (what `ast` gives for it in a str literal):
    (its value, where it ends); None for any other (`PythonicReader._escape` decides)."""
    c = s[j + 1]
    simple = _SIMPLE_ESCAPES.get(c)
    if simple is not None:
        return simple, j + 2
    size = _ESCAPE_LEN.get(c)
    if size is None:
        return None
    end = j + 2 + size
    digits = s[j + 2:end]
    if len(digits) < size or not _HEX.issuperset(digits):
        return None
    code = int(digits, 16)
    return (chr(code), end) if code <= 0x10FFFF else None


def _token(body: str, pos: int, ready: int) -> int:
    """Where the next token starts after the blanks, comments and line continuations from
    `pos`; or, when there is none yet, `~` of where reading stops: at `pos` while a
    comment or continuation is still open at `ready`, else at `ready` (the gap read)."""
    e = _GAP_PY.match(body, pos, ready).end()  # type: ignore[union-attr]
    if e >= ready:
        return ~ready
    if body[e] == "#" or (body[e] == "\\" and e + 1 == ready):
        return ~pos
    return e


class PythonicReader:
    """Call by call: the name at `name(`; a keyword's plain string value streams as it is
    generated (JSON-escaped, each Python escape once complete), another value leaves when
    it ends. When the call's `)` arrives, `ast` parses the whole call: its JSON must start
    with what was sent (else the call is malformed), and the rest leaves, except the
    closing brace (sent when the next call starts or the list ends)."""

    __slots__ = ("held", "hold", "holes", "key", "keys", "pos", "quote", "scan", "sent",
                 "spans", "start", "state", "vstart", "whole")

    def __init__(self, schemas: Schemas | None = None) -> None:
        self.state = HEAD
        self.pos = 0
        self.start = 0  # the call's source start
        self.vstart = 0  # OTHER: the value's source start
        self.key = ""  # OTHER: its keyword
        self.scan: PyScan | None = None
        self.quote = ""
        # STR: the incomplete escape at `pos` that ends the body (body[pos:]), or ""
        self.hold = ""
        # what was sent of the current call's arguments, in pieces: joined once, at the
        # call's `)` (a string grown per row would copy all of it on every row)
        self.sent: list[str] = []
        self.held = ""  # the last call's closing brace
        self.spans: list[int] = []  # each parsed call's source: start, end, start, end, ...
        # the current call: whether the reader read all of it (no REST), its keywords, and
        # where its values are (a string's content, another value's source: start, end, ..)
        self.whole = True
        self.keys: list[str] = []
        self.holes: list[int] = []

    def _emit(self, out: list[Event], text: str) -> None:
        if text:
            self.sent.append(text)
            out.append(text)

    def read(self, body: str, ready: int) -> list[Event]:
        out: list[Event] = []
        pos = self.pos
        steps = self._STEPS
        while pos < ready:
            pos = steps[self.state](self, body, pos, ready, out)
            if pos < 0:
                pos = ~pos
                break
        self.pos = pos
        return out

    # -- states: each reads from `pos` and returns where reading goes on, or `~` of where
    # it stops until more of the body is ready (one method per state, `_STEPS`)
    def _head(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """HEAD: a call's `name(`; the last call's closing brace leaves before its name."""
        m = _CALL_HEAD.match(body, pos, ready)
        if m is None:
            e = _CALL_HEAD_PREFIX.match(body, pos, ready).end()  # type: ignore[union-attr]
            if e < ready:
                self.state = BAD
            return ~pos
        if self.held:
            out.append(self.held)
            self.held = ""
        name = m.group(1)
        name = _NOT_NAME.sub("", name) if "#" in name or "\\" in name \
            else _SPACE.sub("", name)
        out.append(Opened(name if name.isascii() else normalize("NFKC", name)))
        self.start, self.sent = pos, []
        self.whole, self.keys, self.holes = True, [], []
        self.state = KW
        return m.end()

    def _kw(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """KW: `key=` and its value's first character, or the call's `)`."""
        pos = _token(body, pos, ready)
        if pos < 0:
            return pos
        if body[pos] == ")":
            return self._finish(body, pos + 1, out)
        m = _KW.match(body, pos, ready)
        if m is None or m.end() >= ready:
            e = _KW_PREFIX.match(body, pos, ready)
            if e is None or e.end() < ready:
                self.scan = PyScan(pos, 1)  # not `key=`: ast decides at `)`
                self.state = REST
                self.whole = False
                return pos
            return ~pos  # `key=` and its value's first character not there yet
        v = m.end()
        q = body[v]
        if q in "'\"":
            if v + 1 >= ready:
                return ~pos
            if body[v + 1] != q:  # a plain string (not '' nor a triple quote)
                self._emit(out, ("{" if not self.sent else ", ")
                           + json_string(m.group(1)) + ': "')
                self.quote = q
                self.keys.append(m.group(1))
                self.holes.append(v + 1)
                self.state = STR
                return v + 1
        self.key, self.vstart = m.group(1), v
        self.scan = PyScan(v, 1)
        self.state = OTHER
        return v

    def _str_end(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """STR_END: after a plain string's quote, its key's `,` or the call's `)`."""
        pos = _token(body, pos, ready)
        if pos < 0:
            return pos
        c = body[pos]
        if c in ",)":
            self._emit(out, '"')
            pos += 1
            if c == ")":
                return self._finish(body, pos, out)
            self.state = KW
        else:  # more after the string ('a' 'b', 'a' + ...): ast decides at `)`
            self._to_ast(pos)
        return pos

    def _scanned(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """OTHER (a value other than a plain string) and REST (what `ast` decides at `)`):
        the scan to the value's `,` (OTHER) or the call's `)`."""
        st = self.state
        scan = self.scan
        assert scan is not None
        at = scan.close(body, ready, comma=st == OTHER)
        if at < 0:
            return ~scan.pos
        pos = at + 1
        ok = st == OTHER and self._value(body, at, out)
        if not ok:
            self.whole = False  # a value the reader could not take: ast decides
        if body[at] != ",":
            return self._finish(body, pos, out)
        if ok:
            self.state = KW
        else:  # a value that does not convert: ast decides at `)`
            self._to_ast(pos)
        return pos

    def _to_ast(self, pos: int) -> None:
        """REST from `pos`: the scan runs to the call's `)`, and `ast` reads the call whole."""
        self.scan = PyScan(pos, 1)
        self.state = REST
        self.whole = False

    def _after(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """AFTER a call's `)`: a `,` before the next call (the list's `]` ends the body)."""
        e = _token(body, pos, ready)
        if e < 0:
            return e
        if body[e] != ",":
            self.state = BAD
            return ~pos
        self.state = HEAD
        return e + 1

    def _bad(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """BAD: nothing more is read (the call's close finds it malformed)."""
        return ~pos

    def fast(self, at: int, text: str) -> str | None:
        """`read` for a piece appended at `at` inside a plain string value that cannot end
        it (no quote of its kind, unless escaped, and no newline): its value, escaped for
        JSON. Escapes whose value needs no `ast` (`_simple_escape`) are decoded here, an
        incomplete one ending the body (`hold`) with the piece that completes it; one
        ending the piece waits, as `read` leaves it. None: not such a piece (`read`
        decides)."""
        if self.state != STR or "\n" in text or not text:
            return None
        q = self.quote
        if self.pos != at:
            h = self.hold
            if not h or self.pos + len(h) != at:
                return None
            s = h + text
        elif "\\" not in text:
            if q in text:
                return None
            self.pos = at + len(text)  # the common piece
            frag = escape(text)
            if frag:
                self.sent.append(frag)
            return frag
        else:
            s = text
        return self._fast_escapes(at, text, s)

    def _fast_escapes(self, at: int, text: str, s: str) -> str | None:
        """`fast` for a piece with a backslash, or one completing a held escape (`s` is
        the held part and the piece): decoded escape by escape, out of `fast`'s common
        way."""
        value, i, n = "", 0, len(s)
        find = _IN_STR[self.quote]
        while True:
            m = find.search(s, i)
            if m is None:
                value += s[i:]
                i = n
                break
            j = m.start()
            if s[j] != "\\":
                return None  # the string's quote: it ends here (`read` decides)
            value += s[i:j]
            c = s[j + 1] if j + 1 < n else ""
            if not c or (c in _ESCAPE_LEN and j + 2 + _ESCAPE_LEN[c] > n):
                i = j  # an escape the piece ends before it is complete: it waits
                break
            got = _simple_escape(s, j)
            if got is None:
                return None
            value += got[0]
            i = got[1]
        self.pos = at + i - (n - len(text))
        self.hold = s[i:]
        frag = escape(value)
        if frag:
            self.sent.append(frag)
        return frag

    def _string(self, body: str, pos: int, ready: int, out: list[Event]) -> int:
        """STR: send the string's characters as far as they are certain (stopping there
        while the string is open)."""
        find = _IN_STR[self.quote]
        piece = ""
        self.hold = ""
        while True:
            m = find.search(body, pos, ready)
            j = ready if m is None else m.start()
            piece += body[pos:j]
            pos = j
            if m is None:
                break
            c = body[j]
            if c == self.quote:
                pos = j + 1
                self.holes.append(j)
                self.state = STR_END
                break
            if c == "\n":  # a newline in a one-line string: not Python
                self.state = BAD
                break
            got = self._escape(body, j, ready)
            if got is None:
                # the escape is not complete yet (pythonic reads all of the body: ready
                # is its end, so this is body[pos:])
                self.hold = body[j:ready]
                break
            if not got[1]:
                self.state = BAD
                break
            piece += got[0]
            pos = got[1]
        self._emit(out, escape(piece))
        return ~pos if self.state == STR else pos

    def _escape(self, body: str, j: int, ready: int) -> tuple[str, int] | None:
        """The escape at body[j] (a backslash): (its value, where it ends), None when it
        is not complete yet, or ("", 0) when Python rejects it."""
        if j + 1 >= ready:
            return None
        c = body[j + 1]
        if c in _ESCAPE_LEN:
            end = j + 2 + _ESCAPE_LEN[c]
            if end > ready:
                return None
        elif c == "N":
            k = body.find("}", j + 2, ready)
            if k < 0:
                return None
            end = k + 1
        elif c in _OCTAL:
            end = j + 1
            while end < ready and end < j + 4 and body[end] in _OCTAL:
                end += 1
            if end == ready and end < j + 4:
                return None
        else:
            simple = _SIMPLE_ESCAPES.get(c)
            if simple is not None:
                return simple, j + 2
            end = j + 2
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "\d" is kept as written, as Python does
                value = ast.literal_eval(self.quote + body[j:end] + self.quote)
        except (SyntaxError, ValueError):
            return "", 0
        return value, end

    def _value(self, body: str, at: int, out: list[Event]) -> bool:
        """OTHER: the value body[vstart:at] ended; send its key and JSON (False: it does
        not convert, and the call's parse decides)."""
        try:
            text = _literal_json(body[self.vstart:at])
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return False
        self._emit(out, ("{" if not self.sent else ", ")
                   + json_string(self.key) + ": " + text)
        self.keys.append(self.key)
        self.holes += (self.vstart, at)
        return True

    def _finish(self, body: str, end: int, out: list[Event]) -> int:
        """The call's `)` is at end - 1: its whole parse must extend what was sent."""
        source = body[self.start:end]
        sent = "".join(self.sent)
        if self._read_whole(body, end):  # its JSON is what was sent, and the brace
            self._emit(out, "" if sent else "{")
        else:
            call = parse_call(source.strip())
            if call is None or not call.arguments.startswith(sent):
                self.state = BAD
                return end
            self._emit(out, call.arguments[len(sent):-1])
        self.spans += (end - len(source.lstrip()), end)
        self.held = "}"
        self.state = AFTER
        return end

    def _read_whole(self, body: str, end: int) -> bool:
        """Whether the call ending at `end` is valid Python, and its arguments the JSON
        sent, without `ast`: the reader read all of it (every value a plain string, each
        escape checked, or a value `_literal_json` took), its name's parts and keywords
        are ASCII identifiers that are not keywords, no keyword repeats, what lies
        outside the values is printable ASCII, tabs and newlines, and nothing Python's
        tokenizer refuses anywhere (NUL, CR, a lone surrogate) or deep nesting (its
        limits) is in it. Anything else: `parse_call` decides."""
        if not self.whole:
            return False
        keys, holes = self.keys, self.holes
        if len(holes) != 2 * len(keys) or len(set(keys)) != len(keys):
            return False
        source = body[self.start:end]
        if "\x00" in source or "\r" in source or source.count("(") + source.count("[") \
                + source.count("{") > 64:
            return False
        if not source.isascii():
            try:
                source.encode()
            except UnicodeEncodeError:
                return False
        m = _HEAD.match(body, self.start, end)
        if m is None:
            return False
        parts = _SPACE.sub("", m.group(1)).split(".")
        if not all(p.isascii() and not iskeyword(p) for p in parts + keys):
            return False
        edges = [self.start, *holes, end]
        return all(_SKELETON.fullmatch(body, edges[i], edges[i + 1]) is not None
                   for i in range(0, len(edges), 2))

    def close(self, body: str) -> list[Event] | None:
        trailing_comma = self.state == HEAD and self.held \
            and _GAP_PY.fullmatch(body, self.pos) is not None
        if self.state != AFTER and not trailing_comma:
            return None
        if not self._joined(body) and parse_pythonic(body) is None:
            return None
        return [self.held]

    def _joined(self, body: str) -> bool:
        """Whether the list is valid Python without parsing it again: every call was
        (`parse_call`, in the same one level of brackets as in the list) and the rest is
        ASCII blanks and the commas the reader required (a blank Python would reject, a
        form feed or U+3000, or deep nesting, where the list's parse could hit a limit
        one call's did not: `parse_pythonic` decides)."""
        spans = self.spans
        if not spans or body.count("(") + body.count("[") + body.count("{") > 64:
            return False
        gaps = [body[:spans[0]]] + [body[spans[i]:spans[i + 1]]
                                    for i in range(1, len(spans) - 1, 2)] + [body[spans[-1]:]]
        return all(_GAP.fullmatch(g) is not None for g in gaps)

    # by state: HEAD, KW, STR, STR_END, OTHER, REST, AFTER, BAD
    _STEPS: tuple[Callable[[PythonicReader, str, int, int, list[Event]], int], ...] = (
        _head, _kw, _string, _str_end, _scanned, _scanned, _after, _bad)


def pythonic() -> ToolFormat:
    return ToolFormat("pythonic", "[", ListEnd, parse_pythonic, PythonicReader, PY_SECTION,
                      unwrapped=True)
