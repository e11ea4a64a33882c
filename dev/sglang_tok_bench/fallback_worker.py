"""One checkout's side of `fallback.py --section runs`: its per-row decoding of the held-out
requests, for the driver to judge (attributions, texts per row, what a stop string holds
back) and to time (one run of a loop per request line).

It is run as a file (`python -P fallback_worker.py SETUP`) by the measured checkout's own
python (the current one's, or `--baseline`'s), and imports nothing of the checkout it
comes from: only the standard library, `tokenizers`, and the measured checkout's per-row
path, wherever that checkout keeps it (`Layout`). SETUP is a JSON file the driver writes:
the tokenizer's file, the requests, and how each judged run cuts them into rows.

Lines in (stdin): `anchored`, `behind 1`, `behind 4`, `stop`, `names`, `cost NAME`;
one JSON value per line out.
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

LENGTH: Any = {"type": "length", "length": 1}  # the finish before it was typed
STOPS = ["<|stop|>", "。\n\n\n", "STOP!!"]


def first_module(*names: str) -> ModuleType | None:
    """The first of these modules the running checkout has (its layout of that day)."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    return None


class Layout:
    """Where the running checkout keeps the per-row path: a request (`Request.row`), OPEN's
    options, the tokenizer's description, and (before the one decoder interface) the
    per-row streams."""

    def __init__(self, tok: Tokenizer) -> None:
        tokenizer = first_module("sglang_tok.tokenizer")
        request = first_module("shards.messages.request", "sglang_tok.shards.messages.request",
                               "sglang_tok.request")
        control = first_module("sglang_tok.protocols.model.control", "sglang_tok.protocol")
        if tokenizer is None or request is None or control is None:
            raise SystemExit("fallback worker: no per-row path found in this checkout")
        self.request, self.open = request, control.Open
        self.decoder = first_module("sglang_tok.decoder")
        finish = first_module("sglang_tok.finish")
        if finish is not None and hasattr(finish, "Length"):
            global LENGTH
            LENGTH = finish.Length(1)  # a checkout whose finish is typed
        self.info = tokenizer.describe(tok, "llama2-style")

    def req(self, **opts: Any) -> Any:
        return self.request.Request("r", self.info, self.open("r", **opts))

    def pusher(self) -> Callable[[list[int]], str]:
        """A fresh request's rows, decoded alone (no per-row rules), skipping specials."""
        if self.decoder is not None and hasattr(self.decoder, "make_stream"):
            return self.decoder.make_stream(self.info, True).push  # type: ignore[no-any-return]
        req = self.req()  # its decoder, on its slot
        dec, state, slot = req.decoder, req.state, req.slot
        return lambda ids: dec.push(state, slot, ids)  # type: ignore[no-any-return]


def anchored(impl: Layout, reqs: list[list[int]]) -> list[list[list[int]]]:
    """Per request, one id per row: each attribution (id, index, byte offset in the text
    sent so far)."""
    out = []
    for ids in reqs:
        r = impl.req(attribution=True)
        got: list[list[int]] = []
        sent = 0
        for n, row in enumerate(ids):
            d = r.row([row], LENGTH if n == len(ids) - 1 else None, 1, 0, 0)
            got += [[t, k, sent + off] for t, k, off in d.attributions or []]
            sent += len(d.text.encode("utf-8"))
        out.append(got)
    return out


def behind(impl: Layout, cut: list[list[list[int]]]) -> list[list[str]]:
    """Per request, the text of each of its rows (the last one ends it by length)."""
    out = []
    for rows in cut:
        r = impl.req()
        out.append([r.row(row, LENGTH if n == len(rows) - 1 else None, 1, 0, 0).text
                    for n, row in enumerate(rows)])
    return out


def stop(impl: Layout, cut: list[list[list[int]]]) -> list[list[int]]:
    """Per request with the stop strings, the characters each row sent, up to the row that
    ended it (not included)."""
    out = []
    for rows in cut:
        r = impl.req(stop=STOPS)
        sent: list[int] = []
        for row in rows:
            d = r.row(row, None, 1, 0, 0)
            if d.finish is not None:
                break
            sent.append(len(d.text))
        out.append(sent)
    return out


def cost_runs(impl: Layout, tok: Tokenizer, reqs: list[list[int]],
              multi: list[list[list[int]]]) -> dict[str, Callable[[], None]]:
    """The timed loops, per id: DecodeStream (the same code on every side: the noise
    floor), a request's decoding (1 id per row, and 1-4), attributed rows."""
    def ds() -> None:
        for ids in reqs:
            d = DecodeStream(skip_special_tokens=True)
            for i in ids:
                d.step(tok, i)

    def one() -> None:
        for ids in reqs:
            push = impl.pusher()
            for i in ids:
                push([i])

    def several() -> None:
        for rows in multi:
            push = impl.pusher()
            for row in rows:
                push(row)

    def attributed() -> None:
        for ids in reqs:
            row = impl.req(attribution=True).row
            for i in ids:
                row([i], None, 1, 0, 0)

    return {"DecodeStream": ds, "decode 1/row": one, "decode 1-4/row": several,
            "attributed 1/row": attributed}


class Runs:
    """The runs of one checkout on the driver's setup."""

    def __init__(self, setup: dict[str, Any]) -> None:
        self.setup = setup
        self.tok = Tokenizer.from_file(setup["tokenizer"])
        self.impl = Layout(self.tok)
        self.loops = cost_runs(self.impl, self.tok, setup["cost_reqs"], setup["multi"])

    def answer(self, line: str) -> Any:
        cmd, _, arg = line.strip().partition(" ")
        s = self.setup
        if cmd == "anchored":
            return anchored(self.impl, s["reqs"])
        if cmd == "behind":
            return behind(self.impl, s["behind"][arg])
        if cmd == "stop":
            return stop(self.impl, s["stop"])
        if cmd == "names":
            return list(self.loops)
        if cmd == "cost":
            t0 = time.perf_counter()
            self.loops[arg]()
            return time.perf_counter() - t0
        raise ValueError(f"unknown request {line!r}")


def main() -> int:
    with open(sys.argv[1]) as f:
        runs = Runs(json.load(f))
    print(json.dumps("ready"), flush=True)
    for line in sys.stdin:
        print(json.dumps(runs.answer(line)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
