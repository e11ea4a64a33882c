"""Exactness of the incremental decoders against `Tokenizer.decode`, for every family."""

from __future__ import annotations

import pytest
import zoo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import chunk, chunk_sizes, text
from tokenizers import Tokenizer

from sglang_tok.decoder import ByteStream, WindowStream, make_stream
from sglang_tok.tokenizer import TokenizerInfo, describe, load


def reference(tok: Tokenizer, prompt: list[int], ids: list[int], skip: bool) -> str:
    vocab = tok.get_vocab_size()

    def dec(x: list[int]) -> str:
        return tok.decode([i for i in x if 0 <= i < vocab], skip_special_tokens=skip)

    return dec(prompt + ids)[len(dec(prompt)):]


INFOS: dict[str, TokenizerInfo] = {}


def info_for(name: str) -> TokenizerInfo:
    if name not in INFOS:
        INFOS[name] = load("deepseek-v4") if name == "deepseek-v4" else describe(zoo.FAMILIES[name](), name)
    return INFOS[name]


ALL = ["deepseek-v4", *zoo.FAMILIES]


def run_stream(info: TokenizerInfo, prompt: list[int], chunks: list[list[int]], skip: bool,
               one_by_one: bool = False) -> list[str]:
    vocab = info.vocab_size
    stream = make_stream(info, skip, prompt)
    out = []
    for c in chunks:
        c = [i if 0 <= i < vocab else vocab for i in c] if info.byte_table is not None else c
        if one_by_one:
            out.extend(stream.push_one(i) for i in c)
        else:
            out.append(stream.push(c))
    out.append(stream.flush())
    return out


def mixed_ids(info: TokenizerInfo, data: st.DataObject, body: str) -> list[int]:
    ids = info.tokenizer.encode(body, add_special_tokens=False).ids
    specials = sorted(info.special_ids)
    extra = st.one_of(st.sampled_from(specials), st.integers(0, info.vocab_size - 1),
                      st.sampled_from([-1, info.vocab_size, 2**40]))
    n = data.draw(st.integers(0, 4), label="extras")
    for _ in range(n):
        pos = data.draw(st.integers(0, len(ids)), label="pos")
        ids.insert(pos, data.draw(extra, label="extra"))
    return ids


@pytest.mark.parametrize("name", ALL)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=text, data=st.data(), sizes=chunk_sizes, skip=st.booleans())
def test_stream_matches_full_decode(name: str, body: str, data: st.DataObject,
                                    sizes: list[int], skip: bool) -> None:
    info = info_for(name)
    ids = mixed_ids(info, data, body)
    split = data.draw(st.integers(0, len(ids)), label="prompt split")
    prompt, gen = ids[:split], ids[split:]
    one = data.draw(st.booleans(), label="one by one")
    pieces = run_stream(info, prompt, chunk(gen, sizes), skip, one)
    assert "".join(pieces) == reference(info.tokenizer, prompt, gen, skip)
    full = info.tokenizer.decode([i for i in prompt + gen if 0 <= i < info.vocab_size],
                                 skip_special_tokens=skip)
    for p in pieces[:-1]:
        # a streamed piece may end in U+FFFD only where the full decode has one for good
        assert not p.endswith("\ufffd") or "\ufffd" in full


@pytest.mark.parametrize("name", ALL)
@settings(max_examples=80, deadline=None)
@given(data=st.data(), sizes=chunk_sizes, skip=st.booleans())
def test_random_ids_match_full_decode(name: str, data: st.DataObject, sizes: list[int],
                                      skip: bool) -> None:
    """Arbitrary id sequences: invalid UTF-8, lone byte tokens, specials everywhere."""
    info = info_for(name)
    ids = data.draw(st.lists(st.integers(-2, info.vocab_size + 2), max_size=60))
    split = data.draw(st.integers(0, len(ids)))
    pieces = run_stream(info, ids[:split], chunk(ids[split:], sizes), skip)
    assert "".join(pieces) == reference(info.tokenizer, ids[:split], ids[split:], skip)


def test_deepseek_uses_byte_table_and_generic_families_do_not() -> None:
    assert isinstance(make_stream(info_for("deepseek-v4"), True), ByteStream)
    assert isinstance(make_stream(info_for("wordpiece"), True), WindowStream)
    assert isinstance(make_stream(info_for("metaspace_byte_fallback"), True), WindowStream)


def test_prompt_ending_mid_character_is_never_emitted() -> None:
    info = info_for("deepseek-v4")
    tok = info.tokenizer
    ids = tok.encode("价格是€5", add_special_tokens=False).ids
    # split inside the byte tokens of a multi-byte character, wherever one exists
    for split in range(1, len(ids)):
        got = "".join(run_stream(info, ids[:split], [[i] for i in ids[split:]], True))
        assert got == reference(tok, ids[:split], ids[split:], True)


def test_window_stays_bounded_on_long_requests() -> None:
    info = info_for("metaspace_byte_fallback")
    ids = info.tokenizer.encode("hello 世界 " * 400).ids
    stream = WindowStream(info, True)
    out = [stream.push([i]) for i in ids]
    assert len(stream._ids) < 64
    out.append(stream.flush())
    assert "".join(out) == info.tokenizer.decode(ids)


def test_invalid_bytes_then_more_invalid_bytes_do_not_grow_work() -> None:
    """A run of tokens that decode to nothing or U+FFFD (SGLang's O(n^2) case) stays cheap."""
    info = info_for("deepseek-v4")
    tok = info.tokenizer
    lone = tok.token_to_id("ð")  # 0xF0: a 4-byte lead with no continuation
    ids = [lone] * 2000
    stream = make_stream(info, True)
    out = "".join(stream.push([i]) for i in ids) + stream.flush()
    assert out == tok.decode(ids)
