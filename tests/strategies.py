"""Hypothesis strategies shared by the property tests: multilingual text and id streams."""

from __future__ import annotations

from hypothesis import strategies as st

PIECES = [
    "Hello", " world", "的", "解码器", "日本語", "テキスト", "한국어", "ภาษาไทย", "ไม่", "العربية",
    " مرحبا", "Привет", "नमस्ते", "👩‍👩‍👧‍👦", "🏳️‍🌈", "👍🏽", "❤️", "😀", "def f(x):", "\n    return x",
    "  ", "\t", "\n\n", "   ", ".", ",", "!", "?", " don't", " it's", " do not", " '", "**", "`x`",
    "é", "ü", "ß", "Ω", "∑", "\u200b", "\ufeff", "a", "Z", "0", "42", "3.14",
]

text = st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=4)), max_size=30).map("".join)
chunk_sizes = st.lists(st.integers(1, 8), min_size=1, max_size=200)


def chunk(ids: list[int], sizes: list[int]) -> list[list[int]]:
    out, i, k = [], 0, 0
    while i < len(ids):
        n = sizes[k % len(sizes)]
        out.append(ids[i:i + n])
        i += n
        k += 1
    return out
