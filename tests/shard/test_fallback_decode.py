"""The byte-fallback array decoder against the full decode and against the window family.

For SentencePiece-style tokenizers (Metaspace + ByteFallback: Llama-2, Mistral and, without
the Strip, Gemma) `shards/byte_fallback/codec.py` decodes a message's rows from per-slot state
(open byte run, text begun, characters to pass over). Three ways must agree row by row:
the whole-array code, its plain-Python loop and the window family's decoder (which holds
the same open run by asking `tokenizers` itself); and each request's texts, with what
`finish` owes at the end, must equal decode(P + I)[len(decode(P)):] (protocol section 5,
rule 2).
"""

from __future__ import annotations

import functools
import json

import numpy as np
from decoding import decoding
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from sglang_tok.tokenizer import TokenizerInfo, describe
from sglang_tok_testkit import zoo
from shards.byte_fallback.codec import decode_rows_fallback, decode_rows_loop, finish, prompt_state
from shards.byte_fallback.table import FallbackTable, fallback_chain, fallback_table
from shards.window.decoder import WindowDecoder

NAMES = ["metaspace_bpe", "unigram", "no_strip"]


def _without_strip(tok: Tokenizer) -> Tokenizer:
    """Gemma's chain: Replace, ByteFallback, Fuse and no Strip."""
    spec = json.loads(tok.to_str())
    spec["decoder"]["decoders"] = spec["decoder"]["decoders"][:3]
    return Tokenizer.from_str(json.dumps(spec))


@functools.cache
def tokenizer(name: str) -> tuple[TokenizerInfo, FallbackTable]:
    tok = {"metaspace_bpe": zoo.metaspace_byte_fallback_bpe,
           "unigram": zoo.unigram_byte_fallback,
           "no_strip": lambda: _without_strip(zoo.metaspace_byte_fallback_bpe())}[name]()
    info = describe(tok, name)
    tab = fallback_table(info)
    assert tab is not None
    return info, tab


TEXTS = [" héllo wörld 你好世界 🙂👩‍👩‍👧 ", "plain ascii text here. ", "日本語のテキスト",
         "emoji 🏳️‍🌈❤️‍🔥 and 𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "  two leading spaces", "𠀋𪚥龘 ሰላም ᏣᎳᎩ\n\n"]


def test_table_only_for_fallback_chains() -> None:
    for name in NAMES:
        assert tokenizer(name)[1].strip == (name != "no_strip")
    assert fallback_table(describe(zoo.byte_level_bpe(), "bl")) is None
    assert fallback_table(describe(zoo.wordpiece(), "wp")) is None
    chain = json.loads(zoo.metaspace_byte_fallback_bpe().to_str())["decoder"]
    assert fallback_chain(chain) is True
    swapped = {**chain, "decoders": [chain["decoders"][1], chain["decoders"][0],
                                     *chain["decoders"][2:]]}
    assert fallback_chain(swapped) is None  # ByteFallback before Replace: not this rule set


@functools.cache
def windows(name: str) -> WindowDecoder:
    return WindowDecoder(tokenizer(name)[0])


@functools.cache
def id_lists(name: str) -> st.SearchStrategy[list[int]]:
    """Per tokenizer, once: the vocabulary and the encoded texts, not once per example."""
    info = tokenizer(name)[0]
    vocab = info.tokenizer.get_vocab(with_added_tokens=True)
    byte_ids = [vocab[f"<0x{b:02X}>"] for b in range(256)]
    lead_ids = [vocab[f"<0x{b:02X}>"] for b in (0x20, 0xC3, 0xE4, 0xF0)]
    cont_ids = [vocab[f"<0x{b:02X}>"] for b in (0x80, 0x9F, 0xA0, 0xBD)]
    specials = sorted(info.special_ids)
    space = [vocab[t] for t in ("▁", "▁▁") if t in vocab]
    n = info.vocab_size
    one = st.one_of(st.sampled_from(byte_ids), st.sampled_from(lead_ids + cont_ids),
                    st.sampled_from(specials), st.sampled_from(space),
                    st.integers(0, n - 1), st.integers(n, n + 3), st.integers(-2, -1))
    encoded = [info.tokenizer.encode(t, add_special_tokens=False).ids for t in TEXTS]
    return st.one_of(
        st.sampled_from(encoded),
        st.text(max_size=12).map(
            lambda t: info.tokenizer.encode(t, add_special_tokens=False).ids),
        st.lists(one, max_size=24))


def full(info: TokenizerInfo, ids: list[int], skip: bool) -> str:
    return info.tokenizer.decode([i for i in ids if i >= 0], skip_special_tokens=skip)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example,
                                 HealthCheck.data_too_large])
@given(name=st.sampled_from(NAMES), data=st.data())
def test_rows_equal_window_stream_loop_and_full_decode(name: str, data: st.DataObject) -> None:
    info, tab = tokenizer(name)
    vocab = info.vocab_size
    ids_of = id_lists(name)
    nslots = data.draw(st.integers(1, 6), "slots")
    prompts = [data.draw(st.one_of(st.just([]), ids_of), "prompt") for _ in range(nslots)]
    seqs = [data.draw(ids_of, "ids") for _ in range(nslots)]
    skip = [data.draw(st.booleans(), "skip") for _ in range(nslots)]
    window = [decoding(info, s, p, decoder=windows(name)) for s, p in zip(skip, prompts)]
    state = [prompt_state(tab, p, s) for p, s in zip(prompts, skip)]
    got: list[list[str]] = [[] for _ in range(nslots)]
    pos = [0] * nslots
    while any(p < len(s) for p, s in zip(pos, seqs)):
        rows = [i for i in range(nslots) if pos[i] < len(seqs[i]) or data.draw(st.booleans())]
        rows = data.draw(st.permutations(rows), "order")
        row_ids = []
        for i in rows:
            k = data.draw(st.integers(0, 4), "row size")
            row_ids.append(seqs[i][pos[i]:pos[i] + k])
            pos[i] += k
        flat = [x if 0 <= x < vocab else vocab for r in row_ids for x in r]
        width = max([len(state[i].run) for i in rows] + [1])
        runs = np.zeros((len(rows), width), np.uint8)
        for j, i in enumerate(rows):
            runs[j, :len(state[i].run)] = np.frombuffer(state[i].run, np.uint8)
        args = (tab, np.array(flat, np.int64),
                np.cumsum([0] + [len(r) for r in row_ids]).astype(np.int64),
                np.array([int(skip[i]) for i in rows], np.int64), runs,
                np.array([len(state[i].run) for i in rows], np.int64),
                np.array([state[i].started for i in rows], bool),
                np.array([state[i].skip for i in rows], np.int64))
        arr, loop = decode_rows_fallback(*args), decode_rows_loop(*args)
        assert loop.parts is not None
        texts = [arr.text[arr.chars[j]:arr.chars[j + 1]] for j in range(len(rows))]
        assert texts == loop.parts
        assert [arr.buf[arr.cuts[j]:arr.cuts[j + 1]].tobytes() for j in range(len(rows))] == \
            [t.encode() for t in texts]
        for name_, a, b in (("held", arr.held, loop.held), ("held_data", arr.held_data,
                            loop.held_data), ("started", arr.started, loop.started),
                            ("skip", arr.skip, loop.skip)):
            assert np.array_equal(a, b), name_
        held = np.concatenate(([0], np.cumsum(arr.held)))
        for j, i in enumerate(rows):
            assert texts[j] == window[i][0](row_ids[j]), (j, row_ids[j])
            got[i].append(texts[j])
            state[i] = state[i]._replace(run=arr.held_data[held[j]:held[j + 1]].tobytes(),
                                         started=bool(arr.started[j]), skip=int(arr.skip[j]))
    for i in range(nslots):
        tail = finish(tab, *state[i])
        assert tail == window[i][1]()
        expected = full(info, prompts[i] + seqs[i], skip[i])[len(full(info, prompts[i], skip[i])):]
        assert "".join(got[i]) + tail == expected


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(NAMES), data=st.data())
def test_many_rows_of_single_ids(name: str, data: st.DataObject) -> None:
    """The shape of a big decode step (one id per row, many slots): array == loop."""
    info, tab = tokenizer(name)
    vocab = info.vocab_size
    n = data.draw(st.integers(1, 80))
    ids = data.draw(st.lists(st.integers(0, vocab), min_size=n, max_size=n))
    runs = np.zeros((n, 4), np.uint8)
    run_len = np.array(data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n)), np.int64)
    for j in range(n):
        runs[j] = data.draw(st.lists(st.integers(0, 255), min_size=4, max_size=4))
    args = (tab, np.array(ids, np.int64), np.arange(n + 1, dtype=np.int64),
            np.array(data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)), np.int64),
            runs, run_len,
            np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool),
            np.zeros(n, np.int64))
    arr, loop = decode_rows_fallback(*args), decode_rows_loop(*args)
    assert arr.text == loop.text and np.array_equal(arr.chars, loop.chars)
    assert np.array_equal(arr.held_data, loop.held_data) and np.array_equal(arr.held, loop.held)
    assert np.array_equal(arr.started, loop.started)
