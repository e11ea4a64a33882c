"""Texts and tokenizers for benchmarks: faker texts in several languages (the `scripts`
extra; the built-in texts without it), code and emoji, and a Llama-2-style byte-fallback
tokenizer trained on them."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sglang_tok.kit.workload import BUILTIN_TEXTS

if TYPE_CHECKING:  # the tokenizer builders import `tokenizers` when called
    from tokenizers import Tokenizer

LOCALES = ("en_US", "zh_CN", "ja_JP", "ru_RU", "ar_AA", "hi_IN")
LOCALES_LLAMA2 = ("en_US", "zh_CN", "ja_JP", "ko_KR", "ru_RU", "ar_AA", "hi_IN", "th_TH",
                  "el_GR", "he_IL")
CODE_AND_EMOJI = ["```python\ndef f(x):\n    return x ** 2  # 🙂\n```", "👩‍👩‍👧‍👦 🏳️‍🌈 ❤️‍🔥"]


def has_faker() -> bool:
    try:
        import faker  # noqa: F401
    except ImportError:
        return False
    return True


def faker_texts(seed: int, per_locale: int, chars: int,
                locales: Sequence[str] = LOCALES) -> list[str]:
    """`per_locale` texts of up to `chars` characters in each locale (the `scripts` extra's
    faker: raises ImportError without it)."""
    from faker import Faker
    out = []
    for loc in locales:
        f = Faker(loc)
        f.seed_instance(seed)
        out += [f.text(max_nb_chars=chars) for _ in range(per_locale)]
    return out


def multilingual(seed: int = 1, per_locale: int = 30, chars: int = 400) -> list[str]:
    """Faker texts in six languages, code and emoji; the built-in texts without faker."""
    if not has_faker():
        return list(BUILTIN_TEXTS)
    return faker_texts(seed, per_locale, chars) + CODE_AND_EMOJI


def shuffled_text(seed: int = 1, per_locale: int = 80, chars: int = 600) -> str:
    """One long text: `multilingual` texts shuffled and joined by blank lines."""
    if not has_faker():
        return "\n".join(BUILTIN_TEXTS * 400)
    parts = faker_texts(seed, per_locale, chars) + ["\n".join(CODE_AND_EMOJI)]
    random.Random(seed).shuffle(parts)
    return "\n\n".join(parts)


def llama2_style(vocab_size: int = 4000) -> Tokenizer:
    """A Llama-2-style SentencePiece BPE trained on faker text in ten languages (Metaspace
    normalizer, BPE with byte_fallback and the 256 <0xNN> tokens, the HF decoder chain):
    rare characters and most emoji fall back to bytes."""
    from tokenizers import Tokenizer, models, normalizers, trainers

    from sglang_tok_testkit.zoo import sentencepiece_decoder, with_byte_tokens
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    tok.decoder = sentencepiece_decoder()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"],
                                  limit_alphabet=1500, show_progress=False)
    tok.train_from_iterator(faker_texts(1, 60, 400, LOCALES_LLAMA2), trainer)
    return with_byte_tokens(tok)
