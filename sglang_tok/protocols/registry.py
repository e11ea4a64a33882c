"""The table of protocols: what each gives the egress (its reader and writer, which share
what both keep) and a shard (its writer), resolved once per process from `Config`."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from sglang_tok.config import Config, from_sglang, refused
from sglang_tok.errors import ConfigError
from sglang_tok.protocols.model.interface import Reader, Writer
from sglang_tok.protocols.native.reader import NativeReader
from sglang_tok.protocols.native.writer import NativeWriter
from sglang_tok.protocols.sglang import layout as sglang_layout
from sglang_tok.protocols.sglang.layout import Layout
from sglang_tok.protocols.sglang.pickled import PickleReplies, preload_sglang
from sglang_tok.protocols.sglang.positions import Positions
from sglang_tok.protocols.sglang.reader import SglangReader
from sglang_tok.protocols.sglang.reply import BeamTexts, Replies
from sglang_tok.protocols.sglang.workers import WorkerMap
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
    place each field where the running release has it (its layout's positions)."""
    positions = Positions(layout_of(cfg))
    own_tree = from_sglang(cfg)
    if own_tree and (cfg.shards > 1 or cfg.sglang_tokenizer_workers > 1):
        preload_sglang()  # this process cuts pickled columns per shard and worker
    workers = WorkerMap()
    writer = SglangWriter(Replies(positions, workers, cfg.sglang_tokenizer_workers > 1, own_tree),
                          _pickled_replies(positions))
    return (SglangReader(positions, cfg.max_rid_length, cfg.max_row_ids, cfg.kept_stop_ids,
                         workers, own_tree, writer.out), writer)


def _sglang_shard(cfg: Config, info: TokenizerInfo) -> Writer:
    tok = info.tokenizer

    def decode(ids: list[int], skip: bool, spaces: bool) -> str:
        return tok.decode(ids, skip_special_tokens=skip)

    positions = Positions(layout_of(cfg))
    routed = cfg.sglang_tokenizer_workers > 1
    if routed and from_sglang(cfg):
        preload_sglang()  # a message's rows are cut per tokenizer worker here
    return SglangWriter(Replies(positions, WorkerMap(), routed, from_sglang(cfg),
                                BeamTexts(decode, cfg.kept_stop_ids)), _pickled_replies(positions))


def _pickled_replies(positions: Positions) -> PickleReplies | None:
    """A pickle-IPC release (0.5.12-0.5.14) reads its replies pickled, as its own classes."""
    return PickleReplies(positions.layout) if positions.layout.ipc == "pickle" else None


PROTOCOLS: dict[str, Sides] = {"native": Sides(_native_egress, _native_shard),
                               "sglang": Sides(_sglang_egress, _sglang_shard)}


def protocol_of(cfg: Config) -> Sides:
    return PROTOCOLS[cfg.protocol]


def layout_of(cfg: Config) -> Layout:
    """The SGLang release whose messages the service reads (`--sglang-layout`)."""
    try:
        return sglang_layout.load(cfg.sglang_layout)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


LOOPBACK = ("ipc://", "tcp://127.0.0.1:", "tcp://localhost:", "tcp://[::1]:")


def check(cfg: Config) -> None:
    """What the protocol needs of the flags, before any process starts (ConfigError naming
    the flag): SGLang's layout is one the service serves, and its pickles are read only
    from SGLang's own process tree."""
    if cfg.protocol != "sglang":
        return
    try:
        layout = layout_of(cfg)
    except ConfigError as exc:
        raise refused("sglang_layout", str(exc), cfg.sglang_layout) from None
    why = layout.refusal()
    if why is not None:
        raise refused("sglang_layout", why, cfg.sglang_layout)
    if cfg.sglang_own_tree and cfg.input and not cfg.input.startswith(LOOPBACK):
        raise refused("sglang_own_tree", "SGLang's own process tree binds ipc:// or a "
                      "loopback tcp:// endpoint; another host's messages are never unpickled",
                      cfg.input)
    if layout.ipc == "pickle" and cfg.input and not from_sglang(cfg):
        raise refused("input", f"SGLang {layout.release} sends pickled messages, which the "
                      "service reads only from SGLang's own process tree (an ipc:// input, or "
                      "--sglang-own-tree)", cfg.input)
