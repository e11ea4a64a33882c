"""The stand-in's ledger read back: per ended request the ids it sent, and the text a
release's own detokenizer makes of them.

The ledger (`StandinConfig.ledger`) is the only truth a whole-server check has: the
stand-in knows what it sent, SGLang's detokenizer and the plugin only what they made of
it. `expected_text` is that release's `DetokenizerManager.trim_matched_stop` applied to the
full decode, so that a check can say "exact" per release and not per the newest one. The
rules are the release's layout's (`kept_stop_str`, `stop_id_zero_trimmed`, read from its own
source when the layout was dumped), the service's one home of what a release is:

- 0.5.12-0.5.13 return the text untrimmed when the request asks `no_stop_trim` (0.5.14
  on cut it after the stop string);
- before 0.5.21 a matched stop id 0 is falsy and not trimmed (`if not matched`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import msgspec

from sglang_tok.protocols.sglang.layout import (
    LAST_TESTED,
    Layout,
    known,
    known_releases,
    release_key,
)

Decode = Callable[[Sequence[int], bool], str]  # (ids, skip_special_tokens) -> text


class Entry(msgspec.Struct, frozen=True):
    """One ledger line (`main._ledger_line`)."""

    rid: str
    ids: list[int]
    finish: dict[str, Any] | None = None
    beams: list[list[int]] | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    stop: list[str] = []
    stream: bool = True


@cache
def trim_rules(release: str) -> Layout:
    """The layout whose trim rules `release` follows: its own where it was tested, else the
    newest tested release before it (the oldest tested for one older than every one)."""
    tested = known_releases()
    before = [r for r in tested if release_key(r) <= release_key(release)]
    return known(before[-1] if before else tested[0])


def trimmed_ids(ids: Sequence[int], finish: dict[str, Any] | None, no_stop_trim: bool,
                release: str = LAST_TESTED) -> list[int]:
    """The ids a release decodes: a matched stop id cut from the end unless kept."""
    out = list(ids)
    matched = (finish or {}).get("matched")
    if not isinstance(matched, int) or isinstance(matched, bool) or no_stop_trim:
        return out
    if matched == 0 and not trim_rules(release).stop_id_zero_trimmed:
        return out
    if out and out[-1] == matched:
        out.pop()
    return out


def trimmed_text(text: str, finish: dict[str, Any] | None, no_stop_trim: bool,
                 release: str = LAST_TESTED) -> str:
    """The text a release returns after a matched stop string."""
    matched = (finish or {}).get("matched")
    if not isinstance(matched, str) or not matched:
        return text
    if no_stop_trim and trim_rules(release).kept_stop_str == "whole":
        return text
    at = text.find(matched)
    if at < 0:
        return text
    return text[:at + len(matched)] if no_stop_trim else text[:at]


def expected_text(e: Entry, decode: Decode, release: str = LAST_TESTED) -> str:
    """What `release`'s own detokenizer makes of an entry's ids."""
    fin = e.finish if (e.finish or {}).get("type") == "stop" else None
    ids = trimmed_ids(e.ids, fin, e.no_stop_trim, release)
    return trimmed_text(decode(ids, e.skip_special_tokens), fin, e.no_stop_trim, release)


def expected_beams(e: Entry, decode: Decode, release: str = LAST_TESTED) -> list[str]:
    """Each returned beam's text (`decode_beam_search_output`): the best beam ends as the
    group did, the others by length (the stand-in's `_advance_beams`)."""
    out = []
    for i, ids in enumerate(e.beams or ()):
        fin = e.finish if i == 0 and (e.finish or {}).get("type") == "stop" else None
        out.append(decode(trimmed_ids(ids, fin, e.no_stop_trim, release),
                          e.skip_special_tokens))
    return out


_line = msgspec.json.Decoder(Entry)


class Ledger:
    """A ledger file, read as it grows (`new`: the lines since the last call); with
    --dp-size N, rank k's stand-in writes its own beside it (`PATH.dpK`, `config.for_rank`),
    read here with rank 0's."""

    def __init__(self, path: Path, tokenizer: str = "deepseek-v4") -> None:
        from sglang_tok.tokenizer import load_tokenizer

        self.path = path
        self.tok = load_tokenizer(tokenizer)
        self._at: dict[Path, int] = {}

    def files(self) -> list[Path]:
        """Rank 0's ledger and every other rank's, those that exist."""
        ranks = sorted(self.path.parent.glob(self.path.name + ".dp*"))
        return [p for p in (self.path, *ranks) if p.exists()]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return str(self.tok.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def entries(self) -> dict[str, Entry]:
        """Every entry so far, by rid."""
        return {e.rid: e for path in self.files() for e in
                (_line.decode(line) for line in path.read_bytes().splitlines() if line.strip())}

    def new(self) -> list[Entry]:
        """The entries written since the last call (whole lines only)."""
        out: list[Entry] = []
        for path in self.files():
            at = self._at.get(path, 0)
            with open(path, "rb") as f:
                f.seek(at)
                data = f.read()
            end = data.rfind(b"\n") + 1
            self._at[path] = at + end
            out += [_line.decode(line) for line in data[:end].splitlines() if line.strip()]
        return out

    def text(self, e: Entry | dict[str, Any], release: str = LAST_TESTED) -> str:
        entry = e if isinstance(e, Entry) else msgspec.convert(e, Entry)
        return expected_text(entry, self.decode, release)


def dumps(e: Entry) -> str:
    """An entry as its ledger line (for tests that write ledgers)."""
    return json.dumps(msgspec.to_builtins(e))
