"""The table of protocols: what each gives the egress (its reader and writer, which share
what both keep) and a shard (its writer), resolved once per process from `Config`."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from sglang_tok.config import Config, from_sglang, layout_of
from sglang_tok.protocols.interface import Reader, Writer
from sglang_tok.protocols.native.reader import NativeReader
from sglang_tok.protocols.native.writer import NativeWriter
from sglang_tok.protocols.sglang.pickled import PickleReplies, preload_sglang
from sglang_tok.protocols.sglang.plan import Plan
from sglang_tok.protocols.sglang.reader import SglangReader
from sglang_tok.protocols.sglang.reply import BeamTexts, Replies
from sglang_tok.protocols.sglang.writer import SglangWriter
from sglang_tok.tokenizer import TokenizerInfo


class Sides(NamedTuple):
    """One protocol's parts, per process."""

    egress: Callable[[Config], tuple[Reader, Writer]]
    shard: Callable[[Config, TokenizerInfo], Writer]


def _native_egress(cfg: Config) -> tuple[Reader, Writer]:
    return NativeReader(cfg.max_rid_length, cfg.max_row_ids), NativeWriter(cfg.output_format)


def _native_shard(cfg: Config, info: TokenizerInfo) -> Writer:
    return NativeWriter(cfg.output_format)


def _sglang_egress(cfg: Config) -> tuple[Reader, Writer]:
    """The reader and the writer share the tokenizer worker of each live request; both
    place each field where the running release has it (its layout's plan)."""
    plan = Plan(layout_of(cfg))
    own_tree = from_sglang(cfg)
    if own_tree and (cfg.shards > 1 or cfg.sglang_tokenizer_workers > 1):
        preload_sglang()  # this process cuts pickled columns per shard and worker
    replies = Replies(plan, cfg.sglang_tokenizer_workers > 1, own_tree)
    writer = SglangWriter(replies, _pickled_replies(plan))
    return (SglangReader(plan, cfg.max_rid_length, cfg.max_row_ids, cfg.kept_stop_ids,
                         replies, own_tree, writer.out), writer)


def _sglang_shard(cfg: Config, info: TokenizerInfo) -> Writer:
    tok = info.tokenizer

    def decode(ids: list[int], skip: bool, spaces: bool) -> str:
        return tok.decode(ids, skip_special_tokens=skip)

    plan = Plan(layout_of(cfg))
    workers = cfg.sglang_tokenizer_workers > 1
    if workers and from_sglang(cfg):
        preload_sglang()  # a message's rows are cut per tokenizer worker here
    return SglangWriter(Replies(plan, workers, from_sglang(cfg),
                                BeamTexts(decode, cfg.kept_stop_ids)), _pickled_replies(plan))


def _pickled_replies(plan: Plan) -> PickleReplies | None:
    """A pickle-IPC release (0.5.12-0.5.14) reads its replies pickled, as its own classes."""
    return PickleReplies(plan.layout) if plan.layout.ipc == "pickle" else None


PROTOCOLS: dict[str, Sides] = {"native": Sides(_native_egress, _native_shard),
                               "sglang": Sides(_sglang_egress, _sglang_shard)}


def protocol_of(cfg: Config) -> Sides:
    return PROTOCOLS[cfg.protocol]
