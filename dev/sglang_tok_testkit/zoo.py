"""Small tokenizers of every family, trained in-process with the `tokenizers` trainers.

Each mirrors a real model's pipeline (GPT-2/Llama-3 byte-level BPE, Llama-2/Mistral
Metaspace + ByteFallback BPE, a Unigram with byte fallback, BERT WordPiece) so property
tests (and the byte-fallback benchmarks) can check exactness per family without
downloading anything.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable

from tokenizers import (
    AddedToken,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)

from sglang_tok.tokenizer import TokenizerInfo, describe

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's 2026; don't panic!",
    "def main(argv: list[str]) -> int:\n    return len(argv)  # code\n\tindent",
    "大型语言模型的解码器必须逐个标记地输出文本。中文、日本語のテキスト、한국어 문장.",
    "ภาษาไทยไม่มีช่องว่างระหว่างคำ และ العربية تكتب من اليمين إلى اليسار",
    "Emoji: 👩‍👩‍👧‍👦 🏳️‍🌈 👍🏽 ❤️ and Привет, мир! Здравствуйте. नमस्ते दुनिया",
    "   whitespace   runs\n\n\n and tabs\t\t end  ",
    "Markdown **bold** _it_ `code` [link](http://x.y) - item\n1. one\n2. two",
]
SPECIALS = ["<s>", "</s>", "<unk>", "<|im_start|>", "<|im_end|>"]


def _corpus() -> list[str]:
    return CORPUS * 20


def sentencepiece_decoder() -> decoders.Sequence:
    """The Hugging Face decoder chain of Llama-2 / Mistral: Replace("▁", " "), ByteFallback,
    Fuse, Strip(" ", 1, 0)."""
    return decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                              decoders.Fuse(), decoders.Strip(" ", 1, 0)])


@functools.cache
def byte_level_bpe() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(_corpus(), trainer)
    return tok


@functools.cache
def metaspace_byte_fallback_bpe() -> Tokenizer:
    """Llama-2 / Mistral: Metaspace pre-tokenizer, BPE with byte_fallback, the HF decoder chain."""
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    tok.decoder = sentencepiece_decoder()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=SPECIALS,
                                  limit_alphabet=60, show_progress=False)
    tok.train_from_iterator(_corpus(), trainer)
    return with_byte_tokens(tok)


@functools.cache
def unigram_byte_fallback() -> Tokenizer:
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = sentencepiece_decoder()
    trainer = trainers.UnigramTrainer(vocab_size=300, special_tokens=SPECIALS,
                                      unk_token="<unk>", show_progress=False)
    tok.train_from_iterator(_corpus(), trainer)
    return with_byte_tokens(tok)


@functools.cache
def wordpiece() -> Tokenizer:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    trainer = trainers.WordPieceTrainer(vocab_size=500,
                                        special_tokens=["[UNK]", "[CLS]", "[SEP]", "[PAD]"],
                                        show_progress=False)
    tok.train_from_iterator(_corpus(), trainer)
    return tok


def with_byte_tokens(tok: Tokenizer) -> Tokenizer:
    """Add the 256 <0xNN> vocabulary entries and switch byte_fallback on, as Llama-2 has.

    The trainers add such tokens only as special tokens, which decode would skip.
    """
    spec = json.loads(tok.to_str())
    model = spec["model"]
    names = [f"<0x{b:02X}>" for b in range(256)]
    if model["type"] == "BPE":
        vocab = model["vocab"]
        for name in names:
            vocab.setdefault(name, len(vocab))
    else:
        model["vocab"].extend([name, -30.0] for name in names)
    model["byte_fallback"] = True
    return Tokenizer.from_str(json.dumps(spec))


FAMILIES = {
    "byte_level_bpe": byte_level_bpe,
    "metaspace_byte_fallback": metaspace_byte_fallback_bpe,
    "unigram_byte_fallback": unigram_byte_fallback,
    "wordpiece": wordpiece,
}


@functools.cache
def with_markers(markers: tuple[str, ...], name: str = "",
                 base: str = "byte_level_bpe") -> TokenizerInfo:
    """A trained tokenizer (`base`: a function of this module) with a model's reasoning and
    tool markers as special added tokens, as Qwen, GLM, Kimi and gpt-oss ship theirs."""
    return describe(with_special_tokens(globals()[base](), markers), name or "+".join(markers))


def with_special_tokens(tok: Tokenizer, markers: Iterable[str]) -> Tokenizer:
    """A copy of `tok` with `markers` added as special tokens (not normalized)."""
    out = Tokenizer.from_str(tok.to_str())
    out.add_special_tokens([AddedToken(m, special=True, normalized=False) for m in markers])
    return out
