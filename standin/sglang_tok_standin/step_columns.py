"""One scheduler step's `BatchTokenIDOutput`, its columns filled as SGLang 0.5.23's
scheduler fills them (`_GenerationStreamAccumulator` in
`sglang/srt/managers/scheduler_components/output_streamer.py`).

Which requests get a row this step (a streaming request at its interval and not while its
tail could start a stop string, a non-streaming one every SGLANG_FORCE_STREAM_INTERVAL ids,
every request once at its end), and what each row carries, follow SGLang line for line;
the columns come out by SGLang's field names (`COLUMNS`), and `release_message.FieldMap` builds the
running release's own `BatchTokenIDOutput` from them by name (or its msgpack form where
SGLang is not: tests, tools).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sglang_tok.protocols.sglang.wire import WeightVersionSpan

from .requests import Decode, Request

# SGLang's SGLANG_FORCE_STREAM_INTERVAL default: a non-streaming request's ids go to the
# detokenizer every this many, so its final row is not one huge decode
FORCE_STREAM_INTERVAL = 50
WEIGHT_VERSION = "default"

_INPUT_LOGPROBS = ("input_token_logprobs_val", "input_token_logprobs_idx",
                   "input_top_logprobs_val", "input_top_logprobs_idx",
                   "input_token_ids_logprobs_val", "input_token_ids_logprobs_idx")
_FLAT = ("input_top_logprobs_val_flat", "input_top_logprobs_idx_flat",
         "input_top_logprobs_flat_null_prefix")
_OUTPUT_LOGPROBS = ("output_token_logprobs_val", "output_token_logprobs_idx",
                    "output_top_logprobs_val", "output_top_logprobs_idx",
                    "output_token_ids_logprobs_val", "output_token_ids_logprobs_idx")
_PER_ROW = ("rids", "http_worker_ipcs", "finished_reasons", "decoded_texts", "decode_ids",
            "read_offsets", "output_ids", "skip_special_tokens",
            "spaces_between_special_tokens", "no_stop_trim", "prompt_tokens",
            "reasoning_tokens", "completion_tokens", "cached_tokens", "cached_tokens_details",
            "image_tokens", "audio_tokens", "video_tokens", "retraction_counts",
            "weight_versions", "beam_search_output")
_SPEC = ("spec_verify_ct", "spec_num_correct_drafts", "spec_num_block_accept_tokens",
         "spec_num_cap_tokens", "spec_correct_drafts_histogram", "spec_cap_lens_histogram")
# what SGLang's scheduler sends as nil when no request of the batch asks for it (hidden
# states, routed experts, sampling masks...): the stand-in serves no such request
_NIL = ("output_token_entropy_val", "output_token_sampling_mask", "output_hidden_states",
        "routed_experts", "indexer_topk", "placeholder_tokens_idx", "placeholder_tokens_val",
        "customized_info")
# every field the stand-in makes, by SGLang's names (`columns()`'s keys): a release's
# message is built from these by name (`release_message.FieldMap`)
COLUMNS = (*_PER_ROW, *_INPUT_LOGPROBS, *_FLAT, *_OUTPUT_LOGPROBS, "time_stats", "dp_ranks",
           *_SPEC, *_NIL)


class Logprobs:
    """A request's logprob history, one entry per output id, as SGLang's `req.logprob`
    keeps it; a step's row sends the entries since the last row."""

    __slots__ = ("val", "idx", "top_val", "top_idx", "ids_val", "ids_idx", "input")

    def __init__(self, inputs: dict[str, list[Any]]) -> None:
        self.val: list[float] = []
        self.idx: list[int] = []
        self.top_val: list[list[float]] = []
        self.top_idx: list[list[int]] = []
        self.ids_val: list[list[float]] = []
        self.ids_idx: list[list[int]] = []
        self.input = inputs  # the prompt's columns (_INPUT_LOGPROBS), sent with the first row


class StepRows:
    """The rows of one step; `columns()` is the message."""

    def __init__(self, return_logprob: bool, decode: Decode | None,
                 stream_interval: int = 1, dp_rank: int = 0,
                 wrap: Callable[[Any], Any] | None = None,
                 span: Callable[..., Any] = WeightVersionSpan, speculative: bool = False) -> None:
        self.return_logprob = return_logprob
        self.decode = decode
        self.stream_interval = stream_interval
        self.dp_rank = dp_rank
        self.wrap = wrap  # SGLang's wrap_as_pickle, where SGLang is
        self.span = span  # SGLang's WeightVersionSpan, where SGLang has one
        self.cols: dict[str, list[Any]] = {name: [] for name in _PER_ROW}
        self.time_stats: list[Any] = []
        self.speculative = speculative
        self.spec: dict[str, list[Any]] = {name: [] for name in _SPEC}
        if return_logprob:
            for name in (*_INPUT_LOGPROBS, *_FLAT, *_OUTPUT_LOGPROBS):
                self.cols[name] = []

    def __len__(self) -> int:
        return len(self.cols["rids"])

    def _should_output(self, req: Request) -> bool:
        if req.ask.sampling.beam_width > 1:  # only the leader, once, at the group's end
            if not req.finished():
                return False
        if req.finished():
            req.finished_output = True
            if req.finished_len is None:
                req.finished_len = len(req.output_ids)
            return True
        if req.ask.stream:
            interval = req.ask.sampling.stream_interval or self.stream_interval
            unsent = len(req.output_ids) - req.send_token_offset
            should = (interval == 1 or unsent >= interval
                      or (req.send_token_offset == 0 and unsent > 0))
            return should and not req.check_match_stop_str_prefix(self.decode)
        return len(req.output_ids) % FORCE_STREAM_INTERVAL == 0

    def accept(self, req: Request) -> bool:
        """Add req's row if SGLang's scheduler would send one this step."""
        if req.finished() and req.finished_output:
            return False
        if not self._should_output(req):
            return False
        c, ask = self.cols, req.ask
        sent = req.send_token_offset
        lp_sent = req.send_logprob_offset
        out = req.output_ids_through_stop
        c["rids"].append(req.rid)
        c["finished_reasons"].append(req.finished_reason)
        c["output_ids"].append(out[sent:])
        req.send_token_offset = len(out)
        c["prompt_tokens"].append(len(ask.input_ids))
        c["reasoning_tokens"].append(0)
        c["cached_tokens"].append(0)
        c["beam_search_output"].append(req.beams)
        c["http_worker_ipcs"].append(ask.http_worker_ipc)
        c["decoded_texts"].append("")
        decode_ids, read_offset = req.init_incremental_detokenize()
        c["decode_ids"].append(decode_ids[req.send_decode_id_offset:])
        req.send_decode_id_offset = len(decode_ids)
        c["read_offsets"].append(read_offset)
        s = ask.sampling
        c["skip_special_tokens"].append(s.skip_special_tokens)
        c["spaces_between_special_tokens"].append(s.spaces_between_special_tokens)
        c["no_stop_trim"].append(s.no_stop_trim)
        c["completion_tokens"].append(
            sum(len(seq.tokens) for seq in req.beams.sequences) if req.beams is not None
            else len(out))
        c["cached_tokens_details"].append(None)
        c["image_tokens"].append(0)
        c["audio_tokens"].append(0)
        c["video_tokens"].append(0)
        c["retraction_counts"].append(0)
        c["weight_versions"].append(
            [self.span(version=WEIGHT_VERSION, start=0, end=len(out))] if req.finished()
            else None)
        self.time_stats.append(req.time_stats)
        if self.speculative:
            self._spec(req)
        if self.return_logprob:
            self._logprobs(req, len(out), lp_sent)
        return True

    def _spec(self, req: Request) -> None:
        """A row's speculative counters so far (SGLang appends one per row when
        --speculative-algorithm is set); no block or cap drafts here."""
        s = self.spec
        s["spec_verify_ct"].append(req.spec_verify_ct)
        s["spec_num_correct_drafts"].append(req.spec_num_correct_drafts)
        s["spec_num_block_accept_tokens"].append(0)
        s["spec_num_cap_tokens"].append(0)
        s["spec_correct_drafts_histogram"].append(list(req.spec_correct_drafts_histogram))
        s["spec_cap_lens_histogram"].append([])

    def _logprobs(self, req: Request, out_len: int, lp_sent: int) -> None:
        c, lp = self.cols, req.logprobs
        if req.ask.return_logprob and not req.input_logprob_sent:
            for name in _INPUT_LOGPROBS:
                c[name].append(lp.input[name])
            req.input_logprob_sent = True
        else:
            for name in _INPUT_LOGPROBS:
                c[name].append([])
        for name in _FLAT:
            c[name].append(None)
        if req.ask.return_logprob:
            end = max(out_len, 1)
            c["output_token_logprobs_val"].append(lp.val[lp_sent:end])
            c["output_token_logprobs_idx"].append(lp.idx[lp_sent:end])
            c["output_top_logprobs_val"].append(lp.top_val[lp_sent:end])
            c["output_top_logprobs_idx"].append(lp.top_idx[lp_sent:end])
            c["output_token_ids_logprobs_val"].append(lp.ids_val[lp_sent:end])
            c["output_token_ids_logprobs_idx"].append(lp.ids_idx[lp_sent:end])
            req.send_logprob_offset = end
        else:
            for name in _OUTPUT_LOGPROBS:
                c[name].append([])

    def columns(self) -> dict[str, Any]:
        """The message's fields by name (`COLUMNS`), each as SGLang's `to_payload` sets
        it; the logprob columns are nil unless a request of the step asks for them."""
        c: dict[str, Any] = dict(self.cols)
        n = len(self)
        if self.return_logprob:  # nil unless a row uses the flat layout (none does here)
            for name in _FLAT:
                c[name] = None
        if not any(x is not None for x in c["beam_search_output"]):
            c["beam_search_output"] = None
        if not any(c["weight_versions"]):
            c["weight_versions"] = None
        c["time_stats"] = self.wrap(self.time_stats) if self.wrap is not None else None
        c["dp_ranks"] = [self.dp_rank] * n if n else None
        for name in _SPEC:  # one per row when speculative, else each an empty list
            c[name] = self.spec[name]
        for name in (*_NIL, *_INPUT_LOGPROBS, *_FLAT, *_OUTPUT_LOGPROBS):
            c.setdefault(name, None)
        return c
