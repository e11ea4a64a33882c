"""Lean single-process baseline detokenizers on our wire protocol, from their published algorithms.

    vllm    vLLM v1 (`v1/engine/detokenizer.py`, FastIncrementalDetokenizer): one
            `tokenizers.decoders.DecodeStream` per request, primed with the prompt ids and
            stepped once per new id; a stop token that ended the request is not decoded.
    sglang  SGLang's DetokenizerManager (`handle_batch_token_id_out`): per frame, two
            `batch_decode` calls over every row (the surrogate window ids[surr:read] and
            ids[surr:], stop token trimmed on the last row); emit the new suffix unless it
            ends in U+FFFD, else its printable part (`find_printable_text`); then advance
            the offsets and send what was not sent yet.

Written the way a competent engineer writes a single-process detokenizer for this protocol,
so that the service is compared with a lean peer rather than with its own overheads: BATCH
headers are read with one msgspec decoder typed to the six columns a detokenizer needs (the
rest of the array is skipped, not built), token ids with one `array('q')` copy per frame,
and deltas go out as plain maps holding only `rid`, `text`, `ids` and, on the last delta,
`finish` and `usage`. No validation layer (a frame that does not decode is dropped), no
project structs, no logprobs. They honour OPEN's `skip_special_tokens`, `prompt_ids`,
`stream` and `no_stop_trim`, which is what the verifier needs for the fields they produce.

Both answer PINGs as one shard (-1 and 0), so replay and bench drive them like the service.
A baseline is a process of its own (`replay.start_baseline` starts it):

    python -m sglang_tok_bench.baselines vllm --input ipc://... --output ipc://...
"""

from __future__ import annotations

import argparse
import signal
import sys
from array import array
from pathlib import Path
from typing import Any

import msgspec
import zmq
from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

from sglang_tok.tokenizer import load

TAG_RESULT, TAG_BATCH, TAG_ERROR = 0x01, 0x02, 0x03
TAG_OPEN, TAG_ABORT, TAG_PING = 0x4F, 0x41, 0x50
ABORT = {"type": "abort"}
SGLANG_PROMPT_WINDOW = 5  # SGLang's INIT_INCREMENTAL_DETOKENIZATION_OFFSET


class Head(msgspec.Struct, array_like=True, gc=False):
    """The six leading BATCH columns; the trailing ones are skipped by the decoder."""

    rids: list[str]
    finish: list[Any]
    prompt: list[int]
    tok_lens: list[int]
    cached: list[int]
    reasoning: list[int]


HEAD = msgspec.msgpack.Decoder(Head)
ANY = msgspec.msgpack.Decoder()
ENC = msgspec.msgpack.Encoder()


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


def stop_token_trimmed(fin: dict[str, Any], ids: list[int], no_trim: bool) -> bool:
    """A scheduler-matched stop token is left out of the text (protocol rule 3)."""
    if no_trim or fin.get("type") != "stop" or not ids:
        return False
    m = fin.get("matched")
    return (isinstance(m, int) and not isinstance(m, bool) and m == ids[-1]) or (
        isinstance(m, list) and ids[-1] in m)


class Opts:
    """What OPEN said about a request, kept only until its first row."""

    __slots__ = ("skip", "prompt", "stream", "no_trim")

    def __init__(self, body: dict[str, Any]) -> None:
        self.skip = bool(body.get("skip_special_tokens", True))
        self.prompt = list(body.get("prompt_ids") or [])
        self.stream = bool(body.get("stream", True))
        self.no_trim = bool(body.get("no_stop_trim", False))


DEFAULT_OPTS = Opts({})


class Lean:
    """Frame I/O and request bookkeeping shared by both algorithms."""

    def __init__(self, tok: Tokenizer) -> None:
        self.tok = tok
        self.opened: dict[str, Opts] = {}
        self.state: dict[str, Any] = {}

    def on_frame(self, frame: bytes) -> tuple[list[dict[str, Any]], list[int]]:
        """Deltas to send and PING nonces to answer; a frame that does not decode is dropped."""
        tag = frame[0]
        try:
            if tag == TAG_BATCH:
                return self.on_batch(frame), []
            body = ANY.decode(memoryview(frame)[1:])
        except (msgspec.DecodeError, ValueError, IndexError):
            return [], []
        if tag == TAG_OPEN:
            self.opened[body["rid"]] = Opts(body)
        elif tag == TAG_PING:
            return [], [body["nonce"]]
        elif tag == TAG_ABORT:
            return [self.end(rid, None) for rid in body["rids"]], []
        elif tag == TAG_ERROR:
            return [self.end(body[0], body[1])], []
        elif tag == TAG_RESULT:
            return [{"rid": body[0], "result": body[1]}], []
        return [], []

    def end(self, rid: str, error: str | None) -> dict[str, Any]:
        self.state.pop(rid, None)
        self.opened.pop(rid, None)
        d: dict[str, Any] = {"rid": rid, "finish": ABORT}
        if error is not None:
            d["error"] = error
        return d

    def on_batch(self, frame: bytes) -> list[dict[str, Any]]:
        mv = memoryview(frame)
        hlen = int.from_bytes(mv[1:5], "little")
        h = HEAD.decode(mv[5:5 + hlen])
        buf = array("q")
        buf.frombytes(mv[5 + hlen:5 + hlen + 8 * sum(h.tok_lens)])
        return self.rows(h, buf.tolist())

    def rows(self, h: Head, ids: list[int]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def usage(self, h: Head, i: int, n: int) -> dict[str, int]:
        p = h.prompt[i]
        return {"prompt_tokens": p, "completion_tokens": n, "total_tokens": p + n,
                "cached_tokens": h.cached[i], "reasoning_tokens": h.reasoning[i]}

    def last(self, d: dict[str, Any], h: Head, i: int, n: int) -> None:
        """A request's last delta: its finish and usage; its state goes."""
        d["finish"] = h.finish[i]
        d["usage"] = self.usage(h, i, n)
        del self.state[d["rid"]]


class VllmState:
    __slots__ = ("ds", "n", "opts", "held", "tail")

    def __init__(self, opts: Opts) -> None:
        self.ds = DecodeStream(ids=opts.prompt, skip_special_tokens=opts.skip)
        self.n = 0
        self.opts = opts
        # stream: false -> the text and ids gathered until the last row
        self.held: list[Any] | None = None if opts.stream else ["", []]
        # ids stepped since the stream last gave text: bytes it may still hold
        self.tail: list[int] = []


class Vllm(Lean):
    """vLLM v1's FastIncrementalDetokenizer: DecodeStream.step per id, per request.

    One addition to vLLM's algorithm, for the protocol's exactness rule: at a request's end,
    the ids after the stream's last text (an incomplete UTF-8 sequence it still holds) are
    decoded as a full decode would, U+FFFD included; vLLM drops them.
    """

    def rows(self, h: Head, ids: list[int]) -> list[dict[str, Any]]:
        tok, state, step = self.tok, self.state, DecodeStream.step
        out = []
        pos = 0
        for i, (rid, k, fin) in enumerate(zip(h.rids, h.tok_lens, h.finish)):
            row = ids[pos:pos + k]
            pos += k
            s = state.get(rid)
            if s is None:
                s = state[rid] = VllmState(self.opened.pop(rid, DEFAULT_OPTS))
            s.n += k
            todo = row
            if fin is not None and stop_token_trimmed(fin, row, s.opts.no_trim):
                todo = row[:-1]
            text = ""
            quiet = 0  # ids of this row since the stream's last text
            for t in todo:
                try:
                    piece = step(s.ds, tok, t)
                except (OverflowError, TypeError):  # a negative id; vLLM logs and skips it
                    piece = None
                if piece:
                    text += piece
                    quiet = 0
                else:
                    quiet += 1
            if quiet:
                if quiet < len(todo):
                    s.tail = todo[len(todo) - quiet:]
                else:
                    s.tail += todo
            elif s.tail and todo:
                s.tail = []
            if fin is not None and s.tail:
                text += tok.decode([t for t in s.tail if t >= 0],
                                   skip_special_tokens=s.opts.skip)
            if s.held is not None:
                s.held[0] += text
                s.held[1].extend(row)
                if fin is None:
                    continue
                text, row = s.held
            d: dict[str, Any] = {"rid": rid, "text": text, "ids": row}
            if fin is not None:
                self.last(d, h, i, s.n)
            out.append(d)
        return out


class SglangState:
    __slots__ = ("ids", "surr", "read", "decoded", "sent", "n", "opts", "held")

    def __init__(self, opts: Opts) -> None:
        self.ids: list[int] = opts.prompt[-SGLANG_PROMPT_WINDOW:]
        self.surr = 0
        self.read = len(self.ids)
        self.decoded = ""
        self.sent = 0
        self.n = 0
        self.opts = opts
        self.held: list[int] | None = None if opts.stream else []


class Sglang(Lean):
    """SGLang's DetokenizerManager: two batch_decode calls per frame, offsets per request."""

    def decode_batch(self, seqs: list[list[int]], skip: bool) -> list[str]:
        try:
            return self.tok.decode_batch(seqs, skip_special_tokens=skip)
        except OverflowError:  # a negative id: decode as if it were not there
            return self.tok.decode_batch([[t for t in q if t >= 0] for q in seqs],
                                         skip_special_tokens=skip)

    def grouped(self, seqs: list[list[int]], states: list[SglangState]) -> list[str]:
        """One batch_decode per skip_special_tokens value, as SGLang's grouped decode."""
        out = [""] * len(seqs)
        for skip in (True, False):
            idx = [i for i, s in enumerate(states) if s.opts.skip is skip]
            if idx:
                for i, text in zip(idx, self.decode_batch([seqs[i] for i in idx], skip)):
                    out[i] = text
        return out

    def rows(self, h: Head, ids: list[int]) -> list[dict[str, Any]]:
        state = self.state
        states: list[SglangState] = []
        surr_ids: list[list[int]] = []
        read_ids: list[list[int]] = []
        rows: list[list[int]] = []
        pos = 0
        for rid, k, fin in zip(h.rids, h.tok_lens, h.finish):
            row = ids[pos:pos + k]
            pos += k
            s = state.get(rid)
            if s is None:
                s = state[rid] = SglangState(self.opened.pop(rid, DEFAULT_OPTS))
            s.ids.extend(row)
            s.n += k
            states.append(s)
            rows.append(row)
            surr_ids.append(s.ids[s.surr:s.read])
            read = s.ids[s.surr:]
            if fin is not None and stop_token_trimmed(fin, row, s.opts.no_trim):
                read = read[:-1]
            read_ids.append(read)
        if not states:
            return []
        if all(s.opts.skip for s in states):
            surr_texts = self.decode_batch(surr_ids, True)
            read_texts = self.decode_batch(read_ids, True)
        else:
            surr_texts = self.grouped(surr_ids, states)
            read_texts = self.grouped(read_ids, states)
        out = []
        for i, (rid, fin) in enumerate(zip(h.rids, h.finish)):
            s, row = states[i], rows[i]
            new = read_texts[i][len(surr_texts[i]):]
            if fin is None:
                if new and not new.endswith("\ufffd"):
                    s.decoded += new
                    s.surr, s.read = s.read, len(s.ids)
                    new = ""
                else:
                    new = find_printable_text(new)
            text = s.decoded + new
            if s.held is not None:
                s.held.extend(row)
                if fin is None:
                    continue
                row = s.held
            d: dict[str, Any] = {"rid": rid, "text": text[s.sent:], "ids": row}
            s.sent = len(text)
            if fin is not None:
                self.last(d, h, i, s.n)
            out.append(d)
        return out


def serve(base: Lean, input_ep: str, output_ep: str, ready: str) -> None:
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 1000)
    pull.bind(input_ep)
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 1000)
    push.connect(output_ep)
    if ready:
        Path(ready).touch()
    seq = 0
    while True:
        deltas, nonces = base.on_frame(pull.recv())
        if deltas:
            push.send(b"D" + ENC.encode({"shard": 0, "seq": seq, "deltas": deltas}))
            seq += 1
        for nonce in nonces:
            push.send(b"Q" + ENC.encode({"nonce": nonce, "shard": -1}))
            push.send(b"Q" + ENC.encode({"nonce": nonce, "shard": 0}))


def main() -> int:
    ap = argparse.ArgumentParser(description="A lean single-process baseline detokenizer.")
    ap.add_argument("kind", choices=["sglang", "vllm"])
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--tokenizer", default="deepseek-v4")
    ap.add_argument("--ready", default="")
    a = ap.parse_args()
    info = load(a.tokenizer)
    base = (Vllm if a.kind == "vllm" else Sglang)(info.tokenizer)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    serve(base, a.input, a.output, a.ready)
    return 0


if __name__ == "__main__":
    sys.exit(main())
