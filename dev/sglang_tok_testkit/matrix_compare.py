"""The version matrix's comparison, without SGLang: the requests each server gets, what
of a reply must equal stock's, which texts must equal the ledger's, and the table.

Two servers of one release (SGLang's own detokenizer, then the plugin) get the same
requests one at a time, in the same order, so the stand-in gives each the same ids (it
hands streams out in arrival order). A reply then has to match twice: every text the full
decode of the ids the stand-in's ledger says it sent (as that release's own detokenizer
trims it, `standin.ledger`), and the whole reply equal to stock's once what cannot be
equal is dropped: request ids (random per server), timings (keys with `time`, `latency`,
`_ts`), `created`, and the number of streamed chunks (the step clock's, not the
detokenizer's).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from sglang_tok_standin.ledger import Decode, Entry, expected_beams, expected_text

# dropped from a reply before it is compared with stock's
UNEQUAL = frozenset(("id", "created", "chunks", "rid"))


class Probe(msgspec.Struct, frozen=True):
    """One request of the matrix: `route` is `generate` (/generate, its reply as the
    client sees it; streamed, its last chunk) or `chat` (/v1/chat/completions streamed,
    folded per choice); `beam`: only where the release has beam search."""

    name: str
    route: str
    body: dict[str, Any]
    beam: bool = False


def _gen(name: str, stream: bool, **sampling: Any) -> Probe:
    return Probe(name, "generate", {"text": f"Tell me about {name}", "stream": stream,
                                    "sampling_params": sampling})


# stop strings the stand-in's streams meet within a few ids (its corpus cycles Latin,
# Cyrillic, Devanagari, Arabic, Thai text and a table): most end by one, often mid-token
STOPS = ["e", "е", "ा", "ل", "่", "|"]
CHAT = {"model": "default", "messages": [{"role": "user", "content": "Say something."}]}
PROBES: tuple[Probe, ...] = (
    _gen("plain", False, max_new_tokens=48),
    _gen("stream", True, max_new_tokens=120, ignore_eos=True),
    _gen("stop", True, max_new_tokens=200, stop=STOPS),
    _gen("stop-kept", False, max_new_tokens=200, stop=STOPS, no_stop_trim=True),
    _gen("stop-kept-stream", True, max_new_tokens=200, stop=STOPS, no_stop_trim=True),
    _gen("specials", True, max_new_tokens=100, skip_special_tokens=False),
    Probe("logprobs", "generate", {
        "text": "Logprobs please", "return_logprob": True, "top_logprobs_num": 3,
        "return_text_in_logprobs": True, "sampling_params": {"max_new_tokens": 16}}),
    _gen("n2", False, max_new_tokens=24, n=2),
    Probe("beam", "generate", {"text": "Beams", "sampling_params": {
        "max_new_tokens": 24, "beam_width": 3, "n": 2}}, beam=True),
    # unstreamed: a streamed reply drops the logprobs of a step whose text delta is empty
    # (serving_chat's plain path), and which steps those are depends on how the
    # TokenizerManager's reads group the detokenizer's messages
    Probe("chat-logprobs", "chat", {**CHAT, "max_tokens": 32, "stream": False,
                                    "logprobs": True, "top_logprobs": 2}),
    Probe("chat-stream", "chat", {**CHAT, "max_tokens": 48}),
    Probe("chat-n2-stop", "chat", {**CHAT, "max_tokens": 64, "n": 2, "stop": STOPS}),
)


def probes(beam: bool) -> list[Probe]:
    """The probes a release gets (beam search only where it has it)."""
    return [p for p in PROBES if beam or not p.beam]


# --------------------------------------------------------------------------- replies
def _unequal(key: str) -> bool:
    return key in UNEQUAL or "time" in key or "latency" in key or key.endswith("_ts")


def normalized(reply: Any) -> Any:
    """A reply without what two servers cannot share (see the module's docstring)."""
    if isinstance(reply, Mapping):
        return {k: normalized(v) for k, v in reply.items() if not _unequal(str(k))}
    if isinstance(reply, (list, tuple)):
        return [normalized(v) for v in reply]
    return reply


def first_difference(a: Any, b: Any, at: str = "") -> str | None:
    """Where two normalized replies first differ (`path: a != b`); None when equal."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(a) | set(b), key=str):
            if key not in a or key not in b:
                side = "stock" if key in a else "plugin"
                return f"{at}{key}: only {side}'s reply has it"
            got = first_difference(a[key], b[key], f"{at}{key}.")
            if got:
                return got
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{at.rstrip('.')}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            got = first_difference(x, y, f"{at}{i}.")
            if got:
                return got
        return None
    if a != b:
        return f"{at.rstrip('.')}: {_short(a)} != {_short(b)}"
    return None


def _short(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


# --------------------------------------------------------------------------- texts
class Texts(msgspec.Struct):
    """A reply's texts against the ledger: how many, how many exact, the first wrong."""

    checked: int = 0
    exact: int = 0
    wrong: list[str] = []

    def add(self, got: str, want: str | None, what: str) -> None:
        self.checked += 1
        if want is not None and got == want:
            self.exact += 1
        else:
            self.wrong.append(f"{what}: {_short(got, 50)} != "
                              f"{_short(want, 50) if want is not None else 'no ledger entry'}")


def generate_texts(reply: Any, entries: Iterable[Entry], decode: Decode,
                   release: str) -> Texts:
    """/generate: each item's text against its rid's entry (meta_info.id), and each
    returned beam's."""
    by_rid = {e.rid: e for e in entries}
    out = Texts()
    for item in reply if isinstance(reply, list) else [reply]:
        if not isinstance(item, Mapping) or "text" not in item:
            continue
        meta = item.get("meta_info") or {}
        e = by_rid.get(str(meta.get("id")))
        beams = meta.get("beam_results")
        if beams:  # the top-level text is the best beam's; the entry's ids, placeholders
            want = expected_beams(e, decode, release) if e else []
            for i, b in enumerate(beams):
                out.add(b.get("text", ""), want[i] if i < len(want) else None, f"beam {i}")
            out.add(item["text"], want[0] if want else None, "text")
        else:
            out.add(item["text"], expected_text(e, decode, release) if e else None, "text")
    return out


def chat_texts(reply: Mapping[str, Any], entries: Iterable[Entry], decode: Decode,
               release: str) -> Texts:
    """/v1/chat/completions: each choice's content against a distinct entry of the
    request (a choice carries no rid of its own; with n > 1 SGLang also sends a
    prefill-only request, an entry without ids)."""
    left = [expected_text(e, decode, release) for e in entries if e.ids]
    out = Texts()
    for i, choice in enumerate(reply.get("choices") or ()):
        got = choice.get("content") or ""
        want = got if got in left else (left[0] if left else None)
        if want is not None:
            left.remove(want)
        out.add(got, want, f"choice {i}")
    return out


# --------------------------------------------------------------------------- rows
class Side(msgspec.Struct):
    """One server of a release: whether it served, what it refused with, its replies
    (normalized, by probe name), its texts against the ledger."""

    started: bool = False
    refusal: str = ""
    error: str = ""
    replies: dict[str, Any] = {}
    texts: Texts = msgspec.field(default_factory=Texts)


class Row(msgspec.Struct):
    """One release of the matrix."""

    release: str
    stock: Side = msgspec.field(default_factory=Side)
    plugin: Side = msgspec.field(default_factory=Side)
    probes: int = 0
    fields_equal: int = 0
    notes: list[str] = []

    @property
    def served(self) -> bool:
        """The plugin's replies equal stock's, every text exact."""
        p = self.plugin
        return (p.started and self.stock.started and self.probes > 0
                and self.fields_equal == self.probes
                and p.texts.checked > 0 and p.texts.exact == p.texts.checked)

    @property
    def refused(self) -> bool:
        return bool(self.plugin.refusal)


def compare(row: Row) -> Row:
    """Fill `fields_equal` and the notes from the two sides' replies."""
    if not (row.stock.started and row.plugin.started):
        return row
    names = list(row.stock.replies)
    row.probes = len(names)
    row.fields_equal = 0
    for name in names:
        diff = first_difference(row.stock.replies[name], row.plugin.replies.get(name))
        if diff is None:
            row.fields_equal += 1
        else:
            row.notes.append(f"{name}: {diff}")
    for who, side in (("stock", row.stock), ("plugin", row.plugin)):
        row.notes += [f"{who} {w}" for w in side.texts.wrong[:3]]
    return row


def _yes(side: Side) -> str:
    return "yes" if side.started else ("refused" if side.refusal else "no")


COLUMNS = ("release", "started", "exact", "stock exact", "fields", "served",
           "refused / notes")


def table(rows: Iterable[Row]) -> str:
    """The matrix as a fixed-width table: per release whether each server started
    (stock/plugin), the plugin's texts exact against the ledger, stock's, the replies
    whose fields equal stock's, whether the plugin served it, and the plugin's one-line
    refusal or what differed."""
    lines = []
    for r in rows:
        note = r.plugin.refusal or r.stock.error or r.plugin.error or "; ".join(r.notes[:3])
        lines.append((r.release, f"{_yes(r.stock)}/{_yes(r.plugin)}",
                      f"{r.plugin.texts.exact}/{r.plugin.texts.checked}",
                      f"{r.stock.texts.exact}/{r.stock.texts.checked}",
                      f"{r.fields_equal}/{r.probes}",
                      "yes" if r.served else ("refused" if r.refused else "NO"), note))
    widths = [max(len(c), *(len(line[i]) for line in lines)) if lines else len(c)
              for i, c in enumerate(COLUMNS[:-1])]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths) + "  {}"
    return "\n".join([fmt.format(*COLUMNS), *(fmt.format(*line) for line in lines)])
