#!/usr/bin/env python3
"""Single-process baseline detokenizers on our wire protocol, from their published algorithms.

    sglang  SGLang's DetokenizerManager: per frame, two `batch_decode` calls over every row
            (the surrogate window ids[surr:read] and ids[surr:]); emit the suffix unless it
            ends in U+FFFD, else its printable part (`find_printable_text`); advance offsets.
    vllm    vLLM v1: one `tokenizers.decoders.DecodeStream` per request, stepped per id.

Both read the same input frames from the same kind of socket and answer PINGs as one shard
(-1 and 0), so replay and bench drive them exactly like the service.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import zmq
from tokenizers.decoders import DecodeStream

from sglang_tok import protocol
from sglang_tok.protocol import Delta, Deltas, Pong, Usage
from sglang_tok.tokenizer import load


def find_printable_text(text: str) -> str:
    """SGLang's (from HF TextStreamer): hold back an incomplete word, never a CJK char."""
    if text.endswith("\n"):
        return text
    if len(text) > 0 and _is_cjk(ord(text[-1])):
        return text
    if len(text) > 1 and _is_cjk(ord(text[-2])):
        return text[:-1]
    return text[: text.rfind(" ") + 1]


def _is_cjk(cp: int) -> bool:
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class SglangState:
    __slots__ = ("ids", "surr", "read", "decoded", "sent", "skip", "n")

    def __init__(self, skip: bool) -> None:
        self.ids: list[int] = []
        self.surr = self.read = 0
        self.decoded = ""
        self.sent = 0
        self.skip = skip
        self.n = 0


class Baseline:
    def __init__(self, kind: str, tokenizer: str) -> None:
        self.kind = kind
        self.info = load(tokenizer)
        self.tok = self.info.tokenizer
        self.vocab = self.info.vocab_size
        self.skip: dict[str, bool] = {}
        self.state: dict[str, Any] = {}

    def on_batch(self, b: protocol.Batch) -> list[Delta]:
        ids = b.token_ids()
        st = b.tokens.row_starts
        rows = [(rid, [i for i in ids[st[n]:st[n + 1]] if 0 <= i < self.vocab],
                 ids[st[n]:st[n + 1]], b.header.finish_reasons[n], b.header.prompt_tokens[n])
                for n, rid in enumerate(b.rids)]
        return self._sglang(rows) if self.kind == "sglang" else self._vllm(rows)

    def _sglang(self, rows: list[Any]) -> list[Delta]:
        states = []
        for rid, clean, _, _, _ in rows:
            s = self.state.get(rid)
            if s is None:
                s = self.state[rid] = SglangState(self.skip.pop(rid, True))
            s.ids.extend(clean)
            s.n += len(clean)
            states.append(s)
        # two batch_decode calls over every row (split by skip flag, as HF would need)
        surr = self.tok.decode_batch([s.ids[s.surr:s.read] for s in states],
                                     skip_special_tokens=True)
        full = self.tok.decode_batch([s.ids[s.surr:] for s in states], skip_special_tokens=True)
        out = []
        for (rid, _, raw, fin, prompt), s, a, b in zip(rows, states, surr, full):
            new = b[len(a):]
            if fin is None:
                if new and not new.endswith("\ufffd"):
                    s.decoded += new
                    s.surr, s.read = s.read, len(s.ids)
                    new = ""
                else:
                    new = find_printable_text(new)
            text = s.decoded + new
            delta = Delta(rid, text[s.sent:], raw)
            s.sent = len(text)
            if fin is not None:
                delta.finish = fin
                delta.usage = Usage(prompt, s.n, prompt + s.n, 0, 0)
                del self.state[rid]
            out.append(delta)
        return out

    def _vllm(self, rows: list[Any]) -> list[Delta]:
        out = []
        for rid, clean, raw, fin, prompt in rows:
            s = self.state.get(rid)
            if s is None:
                skip = self.skip.pop(rid, True)
                s = self.state[rid] = [DecodeStream(skip_special_tokens=skip), 0]
            ds = s[0]
            parts = []
            for i in clean:
                t = ds.step(self.tok, i)
                if t:
                    parts.append(t)
            s[1] += len(clean)
            delta = Delta(rid, "".join(parts), raw)
            if fin is not None:
                delta.finish = fin
                delta.usage = Usage(prompt, s[1], prompt + s[1], 0, 0)
                del self.state[rid]
            out.append(delta)
        return out

    def on_control(self, msg: Any) -> tuple[list[Delta], list[Pong]]:
        if isinstance(msg, protocol.Open):
            self.skip[msg.rid] = msg.skip_special_tokens
        elif isinstance(msg, protocol.Ping):
            return [], [Pong(msg.nonce, -1), Pong(msg.nonce, 0)]
        elif isinstance(msg, (protocol.Abort, protocol.Error)):
            rids = msg.rids if isinstance(msg, protocol.Abort) else [msg.rid]
            out = []
            for rid in rids:
                self.state.pop(rid, None)
                out.append(Delta(rid, finish={"type": "abort"},
                                 error=getattr(msg, "message", None)))
            return out, []
        return [], []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=["sglang", "vllm"])
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--tokenizer", default="deepseek-v4")
    ap.add_argument("--ready", default="")
    a = ap.parse_args()
    base = Baseline(a.kind, a.tokenizer)
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 1000)
    pull.bind(a.input)
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 1000)
    push.connect(a.output)
    if a.ready:
        Path(a.ready).touch()
    seq = 0
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        frame = pull.recv()
        pongs: list[Pong] = []
        try:
            if frame[0] == protocol.TAG_BATCH:
                deltas = base.on_batch(protocol.decode_batch(frame))
            else:
                deltas, pongs = base.on_control(protocol.decode_control(frame))
        except protocol.FrameError:
            continue
        if deltas:
            push.send(protocol.encode_deltas(Deltas(0, seq, deltas)))
            seq += 1
        for p in pongs:
            push.send(protocol.encode_pong(p))


if __name__ == "__main__":
    sys.exit(main())
