"""Where each field sits, for one SGLang release: the reader's and the writer's positions, built
by field name from its `Layout` once per process, so that reading and writing a message
costs index lookups and nothing more.

The egress hands each shard the scheduler's fields a reply passes on (`Carried columns`), in
the order of `carried` (the fields SGLang's detokenizer carries into its `BatchStrOutput`,
in the reply's order); egress and shards build the same positions from the same layout.
"""

from __future__ import annotations

from typing import Any

from msgspec import Raw

from . import layout as layouts
from . import wire
from .layout import DEFAULT, NIL, TEXTS, Layout

TOKEN_IDS = "BatchTokenIDOutput"
STR_OUTPUT = "BatchStrOutput"
EMBEDDING = "BatchEmbeddingOutput"
FREEZE_GC = "FreezeGCReq"
CONFIGURE_LOGGING = "ConfigureLoggingReq"


class Positions:
    """One layout's positions. A message's fields list holds the tag at 0, so the scheduler's
    field `name` is `fields[at[name]]`."""

    def __init__(self, layout: Layout) -> None:
        why = layout.refusal()
        if why is not None:
            raise ValueError(why)
        self.layout = layout
        self.count = len(layout.token_ids)  # fields of a BatchTokenIDOutput after its tag
        self.at = {name: i + 1 for i, name in enumerate(layout.token_ids)}
        self.pickled = frozenset(layout.pickled)
        # every column but the read and the pickled ones: nil, [] or one entry per row
        self.other_columns = tuple((name, self.at[name]) for name in layout.token_ids
                                   if name not in layouts.READ and name not in self.pickled)
        # the reply: per BatchStrOutput field, where its value comes from
        sources = [how.partition("=")[2] for how in layout.carry]
        self.carried = tuple(dict.fromkeys(s for s in sources if s))
        self.carried_at = [self.at[name] for name in self.carried]
        self.b64 = frozenset(k for k, name in enumerate(self.carried)
                             if any(how == "b64=" + name for how in layout.carry))
        self.pickled_carried = frozenset(k for k, name in enumerate(self.carried)
                                        if name in self.pickled)
        self.beams = self.carried.index("beam_search_output") \
            if "beam_search_output" in self.carried else -1
        self.beams_at = self.at.get("beam_search_output", 0)
        self.rids_k = self.carried.index("rids")  # refusal() made sure a reply carries them
        carried_k = {name: k for k, name in enumerate(self.carried)}
        # (reply position, source) : a carried column's index, or a fixed value
        self.out_count = len(layout.str_output)
        self.out_at = {name: i for i, name in enumerate(layout.str_output)}
        self.texts_at = self.out_at["output_strs"]
        self.from_carried: list[tuple[int, int]] = []
        fixed: list[Any] = [None] * self.out_count
        for i, (name, how) in enumerate(zip(layout.str_output, layout.carry)):
            source = how.partition("=")[2]
            if source:
                self.from_carried.append((i, carried_k[source]))
            elif how == DEFAULT:
                fixed[i] = Raw(wire.encoder.encode(layout.defaults[name]))
            elif how not in (TEXTS, NIL):  # refusal() let nothing else through
                raise ValueError(f"BatchStrOutput.{name}: {how}")
        self.fixed = fixed  # the reply's fields before the texts and carried columns go in
        self.embedding_count = len(layout.embedding)
        self.embedding_whole = frozenset(i for i, name in enumerate(layout.embedding)
                                         if name in self.pickled)
        self.embedding_ipcs = layout.embedding.index("http_worker_ipcs") + 1 \
            if "http_worker_ipcs" in layout.embedding else 0
        logging_fields = layout.configure_logging
        self.log_level_at = logging_fields.index("log_level") + 1 \
            if "log_level" in logging_fields else 0
        self.sequences_at = layout.beam_output.index("sequences") + 1 \
            if "sequences" in layout.beam_output else 0

        self.array = wire.array_pair if layout.arrays == "pair" else wire.array_ext

    def reply(self, columns: list[Raw], texts: list[str]) -> list[Any]:
        """A BatchStrOutput's fields: the texts, each carried column where the release's
        detokenizer puts it, the rest None or the class default."""
        fields = self.fixed.copy()
        for at, k in self.from_carried:
            fields[at] = columns[k]
        fields[self.texts_at] = texts
        return fields

    def own_reply(self, values: dict[str, Any]) -> list[Any]:
        """A BatchStrOutput of the service's own rows, from its fields by name (the others
        None or the class default, as the release's detokenizer leaves them)."""
        fields = self.fixed.copy()
        for name, value in values.items():
            at = self.out_at.get(name)
            if at is not None:
                fields[at] = value
        return fields
