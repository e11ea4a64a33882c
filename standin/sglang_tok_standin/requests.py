"""A request as SGLang 0.5.23's scheduler holds it, for what reaches the detokenizer.

The stand-in scheduler runs no model, but every field it sends must be the one SGLang's
scheduler would send for the same ids: the incremental-decode window (`decode_ids`,
`read_offsets`, from `Req.init_incremental_detokenize`), the ids through the stop
(`output_ids_through_stop`), and the finish rules in `Req.update_finish_state`'s order
(abort, stop string, stop token or EOS, length), with a matched stop string located the
way `_locate_str_stop_finished_len` does it. The names follow SGLang's so that a reader
can hold the two side by side (`sglang/srt/managers/schedule_batch.py`).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

# SGLang's INIT_INCREMENTAL_DETOKENIZATION_OFFSET: prompt ids before the first output id
# that the first row's decode_ids carry as decoding context
CONTEXT_IDS = 5
Finish = dict[str, Any]
Decode = Callable[[Sequence[int]], str]


def finish_stop(matched: int | str) -> Finish:
    """FINISH_MATCHED_TOKEN / FINISH_MATCHED_STR `to_json`."""
    return {"type": "stop", "matched": matched}


def finish_length(length: int) -> Finish:
    return {"type": "length", "length": length}


def finish_abort(message: str | None = None, status_code: int | None = None,
                 err_type: str | None = None) -> Finish:
    return {"type": "abort", "message": message or "Aborted", "status_code": status_code,
            "err_type": err_type}


class Sampling(msgspec.Struct, frozen=True):
    """The sampling parameters the scheduler's output depends on (SGLang's
    `SamplingParams` after `normalize`)."""

    max_new_tokens: int = 128
    stop_strs: tuple[str, ...] = ()
    # the longest stop string in ids (SGLang encodes each with the tokenizer)
    stop_str_max_len: int = 0
    stop_token_ids: frozenset[int] = frozenset()
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    stream_interval: int | None = None
    # beam search: beam_width > 1 returns n sequences at the end, one row for the group
    beam_width: int = 1
    n: int = 1


class Ask(msgspec.Struct, frozen=True):
    """What a tokenized request asks of the scheduler (SGLang's
    `TokenizedGenerateReqInput`, the fields the output depends on)."""

    rid: str
    input_ids: tuple[int, ...]
    sampling: Sampling = Sampling()
    stream: bool = True
    http_worker_ipc: str | None = None
    return_logprob: bool = False
    top_logprobs_num: int = 0
    token_ids_logprob: tuple[int, ...] | None = None
    logprob_start_len: int = -1
    # a request may steer a synthetic stream (SGLang's `custom_params`, keys
    # sglang_tok_ids_per_step and sglang_tok_length): 0 keeps the stand-in's setting
    ids_per_step: int = 0
    length: int = 0
    # sglang_tok_abort_first: a PD decode server's request whose KV cache never arrived,
    # aborted before any output (SGLang's `prepare_abort`, status 500)
    abort_first: bool = False


class Request:
    """One live request: its ids so far, how it ended, and what was sent of it."""

    __slots__ = ("ask", "rid", "output_ids", "finished_reason", "finished_len", "to_finish",
                 "finished_output", "send_token_offset", "send_decode_id_offset",
                 "send_logprob_offset", "surr_offset", "read_offset", "surr_and_decode_ids",
                 "cur_decode_ids_len", "input_logprob_sent", "logprobs", "stream",
                 "time_stats", "beams", "beam_ids", "spec_verify_ct",
                 "spec_num_correct_drafts", "spec_correct_drafts_histogram")

    def __init__(self, ask: Ask, stream: Any) -> None:
        self.ask = ask
        self.rid = ask.rid
        self.output_ids: array[int] = array("q")
        self.finished_reason: Finish | None = None
        self.finished_len: int | None = None
        self.to_finish: Finish | None = None
        self.finished_output = False
        self.send_token_offset = 0
        self.send_decode_id_offset = 0
        self.send_logprob_offset = 0
        self.surr_offset: int | None = None
        self.read_offset: int | None = None
        self.surr_and_decode_ids: array[int] = array("q")
        self.cur_decode_ids_len = 0
        self.input_logprob_sent = False
        self.logprobs: Any = None  # rows.Logprobs, when the request asks for them
        self.stream = stream  # streams.Stream: where its ids come from
        self.time_stats: Any = None  # SGLang's SchedulerReqTimeStats, where SGLang is
        self.beams: Any = None  # a finished beam group's sequences (a BeamSearchOutput)
        self.beam_ids: array[int] = array("q")  # a beam group's best beam so far
        # speculative decoding as SGLang's `Req` counts it: verify steps, drafts accepted,
        # and how many steps accepted each count of drafts
        self.spec_verify_ct = 0
        self.spec_num_correct_drafts = 0
        self.spec_correct_drafts_histogram: list[int] = []

    # ------------------------------------------------------------------ state
    def finished(self) -> bool:
        return self.finished_reason is not None

    @property
    def output_ids_through_stop(self) -> array[int]:
        if self.finished_len is not None:
            return self.output_ids[: self.finished_len]
        return self.output_ids

    def init_incremental_detokenize(self) -> tuple[array[int], int]:
        """(decode ids so far, read offset within them), as SGLang's `Req` keeps them:
        up to CONTEXT_IDS prompt ids, then the output ids through the stop."""
        out = self.output_ids_through_stop
        if self.surr_offset is None or self.read_offset is None:
            prompt = self.ask.input_ids
            self.read_offset = len(prompt)
            self.surr_offset = max(self.read_offset - CONTEXT_IDS, 0)
            self.surr_and_decode_ids = array("q", prompt[self.surr_offset:])
            self.surr_and_decode_ids.extend(out)
        else:
            self.surr_and_decode_ids.extend(out[self.cur_decode_ids_len:])
        self.cur_decode_ids_len = len(out)
        return self.surr_and_decode_ids, self.read_offset - self.surr_offset

    def verified(self, accepted: int) -> None:
        """One speculative verify step that accepted `accepted` ids: the target model's
        own id and `accepted - 1` drafts (`update_spec_correct_drafts_histogram`)."""
        correct = max(accepted - 1, 0)
        self.spec_verify_ct += 1
        self.spec_num_correct_drafts += correct
        hist = self.spec_correct_drafts_histogram
        if len(hist) <= correct:
            hist.extend([0] * (correct - len(hist) + 1))
        hist[correct] += 1

    # ------------------------------------------------------------------ a step
    def extend(self, ids: Sequence[int], decode: Decode | None, eos: frozenset[int]) -> None:
        """The ids this step accepted, then the finish rules in SGLang's order."""
        self.output_ids.extend(ids)
        self.update_finish_state(len(ids), decode, eos)

    def update_finish_state(self, new_len: int, decode: Decode | None,
                            eos: frozenset[int]) -> None:
        if self.finished():
            return
        if self.to_finish is not None:
            self.finished_reason, self.to_finish = self.to_finish, None
            return
        if new_len and decode is not None and self._str_finish(new_len, decode):
            self._cap()
            return
        if new_len and self._token_finish(new_len, eos):
            self._cap()
            return
        cap = self.ask.sampling.max_new_tokens
        if len(self.output_ids) >= cap:
            self.finished_reason = finish_length(cap)
            self.finished_len = cap

    def _tail_len(self, new_len: int) -> int:
        longest = self.ask.sampling.stop_str_max_len + 1
        return min(longest + max(new_len - 1, 0), len(self.output_ids))

    def tail_str(self, decode: Decode, new_len: int = 1) -> str:
        if not self.ask.sampling.stop_strs:
            return ""
        return decode(self.output_ids[-self._tail_len(new_len):])

    def _str_finish(self, new_len: int, decode: Decode) -> bool:
        stops = self.ask.sampling.stop_strs
        if not stops:
            return False
        tail = self.tail_str(decode, new_len)
        for stop in stops:
            if stop in tail:
                self.finished_reason = finish_stop(stop)
                self.finished_len = self._locate(new_len, stop, decode)
                return True
        return False

    def _locate(self, new_len: int, stop: str, decode: Decode) -> int:
        """The output length through the first window prefix that holds `stop`."""
        tail_len = self._tail_len(new_len)
        start = len(self.output_ids) - tail_len
        window = self.output_ids[start:]
        for count in range(max(1, len(window) - new_len + 1), len(window)):
            if stop in decode(window[:count]):
                return start + count
        return len(self.output_ids)

    def _token_finish(self, new_len: int, eos: frozenset[int]) -> bool:
        sampling = self.ask.sampling
        if sampling.ignore_eos:
            return False
        new = self.output_ids[-new_len:]
        for i, tid in enumerate(new):
            if tid in sampling.stop_token_ids or tid in eos:
                self.finished_reason = finish_stop(tid)
                self.finished_len = len(self.output_ids) - new_len + i + 1
                return True
        return False

    def _cap(self) -> None:
        """A stop past max_new_tokens is a length finish (speculative runs overshoot)."""
        cap = self.ask.sampling.max_new_tokens
        if self.finished_len is not None and self.finished_len > cap:
            self.finished_reason = finish_length(cap)
            self.finished_len = cap

    def check_match_stop_str_prefix(self, decode: Decode | None) -> bool:
        """The tail could be the start of a stop string: a streaming row waits."""
        stops = self.ask.sampling.stop_strs
        if not stops or decode is None:
            return False
        tail = self.tail_str(decode)
        if not tail:
            return False
        for stop in stops:
            if not stop:
                continue
            if stop in tail:
                return True
            for i in range(1, min(len(tail), len(stop)) + 1):
                if tail[-i:] == stop[:i]:
                    return True
        return False
