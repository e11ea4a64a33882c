"""Exactness of every family's decoder, row by row, against `Tokenizer.decode`.

A per-row request's rows go through its shard's decoder on its slot's state
(`RowDecoder.push`, then `flush` at its end): byte-level BPE, SentencePiece byte fallback
and the window family (WordPiece, and any chain; byte runs included).
"""

from __future__ import annotations

import numpy as np
import pytest
from decoding import cached_decoders, decoding, one_slot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import chunk, chunk_sizes, text
from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

from sglang_tok.finish import Length, Stop
from sglang_tok.protocols.model.control import Open
from sglang_tok.tokenizer import TokenizerInfo, describe, load
from sglang_tok_testkit import zoo
from shards.byte_fallback.decoder import FallbackLoop
from shards.byte_level.decoder import ByteLoop
from shards.decoders import decoders_for, family_of
from shards.decoding.interface import RowDecoder
from shards.messages.request import Request
from shards.window.decoder import WindowDecoder


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
               one_by_one: bool = False, decoder: RowDecoder | None = None) -> list[str]:
    push, flush = decoding(info, skip, prompt, decoder=decoder)
    out = []
    for c in chunks:
        if one_by_one:
            out.extend(push([i]) for i in c)
        else:
            out.append(push(c))
    out.append(flush())
    return out


_WINDOWS: dict[str, WindowDecoder] = {}


def window_for(name: str) -> WindowDecoder:
    """The window family's decoder on any tokenizer (it takes every decoder chain)."""
    if name not in _WINDOWS:
        _WINDOWS[name] = WindowDecoder(info_for(name))
    return _WINDOWS[name]


def decoder_of(name: str, which: str) -> RowDecoder:
    """The tokenizer's own family ("family") or the window family ("window")."""
    return cached_decoders(info_for(name)).per_row if which == "family" else window_for(name)


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


# every tokenizer by its own family's decoder, and by the window family's (which takes any)
DECODERS = [(name, "family") for name in ALL] + \
    [(name, "window") for name in ALL if name != "wordpiece"]


@pytest.mark.parametrize("name,which", DECODERS)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=text, data=st.data(), sizes=chunk_sizes, skip=st.booleans())
def test_stream_matches_full_decode(name: str, which: str, body: str, data: st.DataObject,
                                    sizes: list[int], skip: bool) -> None:
    info = info_for(name)
    ids = mixed_ids(info, data, body)
    split = data.draw(st.integers(0, len(ids)), label="prompt split")
    prompt, gen = ids[:split], ids[split:]
    one = data.draw(st.booleans(), label="one by one")
    pieces = run_stream(info, prompt, chunk(gen, sizes), skip, one, decoder_of(name, which))
    assert "".join(pieces) == reference(info.tokenizer, prompt, gen, skip)
    full = info.tokenizer.decode([i for i in prompt + gen if 0 <= i < info.vocab_size],
                                 skip_special_tokens=skip)
    for p in pieces[:-1]:
        # a streamed piece may end in U+FFFD only where the full decode has one for good
        assert not p.endswith("\ufffd") or "\ufffd" in full


@pytest.mark.parametrize("name,which", DECODERS)
@settings(max_examples=80, deadline=None)
@given(data=st.data(), sizes=chunk_sizes, skip=st.booleans())
def test_random_ids_match_full_decode(name: str, which: str, data: st.DataObject,
                                      sizes: list[int], skip: bool) -> None:
    """Arbitrary id sequences: invalid UTF-8, lone byte tokens, specials everywhere."""
    info = info_for(name)
    ids = data.draw(st.lists(st.integers(-2, info.vocab_size + 2), max_size=60))
    split = data.draw(st.integers(0, len(ids)))
    pieces = run_stream(info, ids[:split], chunk(ids[split:], sizes), skip,
                        decoder=decoder_of(name, which))
    assert "".join(pieces) == reference(info.tokenizer, ids[:split], ids[split:], skip)


def test_deepseek_uses_byte_table_and_generic_families_do_not() -> None:
    assert isinstance(decoders_for(info_for("deepseek-v4")).per_row, ByteLoop)
    assert isinstance(decoders_for(info_for("wordpiece")).per_row, WindowDecoder)
    assert isinstance(decoders_for(info_for("metaspace_byte_fallback")).per_row, FallbackLoop)
    # each family's own test, chained: the first that takes a tokenizer decodes it
    assert [family_of(info_for(n)) for n in ("deepseek-v4", "metaspace_byte_fallback",
                                             "wordpiece")] == ["byte-level", "byte-fallback",
                                                               "window"]


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
    window = window_for("metaspace_byte_fallback")
    state = one_slot(window)
    out = [window.push(state, 0, [i]) for i in ids]
    assert len(state.windows[0].ids) < 64
    out += window.flush(state, [0], np.zeros(1, np.int64))[1]
    assert "".join(out) == info.tokenizer.decode(ids)


def test_invalid_bytes_then_more_invalid_bytes_do_not_grow_work() -> None:
    """A run of tokens that decode to nothing or U+FFFD (SGLang's O(n^2) case) stays cheap."""
    info = info_for("deepseek-v4")
    tok = info.tokenizer
    lone = tok.token_to_id("ð")  # 0xF0: a 4-byte lead with no continuation
    ids = [lone] * 2000
    push, flush = decoding(info)
    out = "".join(push([i]) for i in ids) + flush()
    assert out == tok.decode(ids)


# ------------------------------------------------------------------ byte-fallback runs
# Llama-2-style tokenizers (Metaspace + ByteFallback) spell rare characters as runs of
# <0xNN> ids, which `tokenizers` decodes all-or-nothing: the window path holds an open run
# and must release everything before it, and attribution must be per character.
from sglang_tok_testkit.oracles import byte_values, oracle_anchors, to_bytes  # noqa: E402

FALLBACK = ["metaspace_byte_fallback", "unigram_byte_fallback"]
RARE = ["🚶\ufe0f", "🚶", "\ufe0f", "\u200d", "👩\u200d👩\u200d👧\u200d👦", "🧑🏾\u200d💻", "🇯🇵",
        "𠀋", "𪚥", "龘", "情 ", "情\n", "ᚠᛇᚻ", "𓀀𓁐", "ꦗꦮ", "ⵜⴰⵎⴰⵣⵉⵖⵜ", "ሰላም", "❤\ufe0f\u200d🔥",
        " b", "a", "\n", "世界", "Привет", " ", "▁"]
rare_text = st.lists(st.one_of(st.sampled_from(RARE), text), min_size=1, max_size=12).map("".join)


def byte_run_ids(info: TokenizerInfo, data: st.DataObject, body: str) -> list[int]:
    """Encoded text, with runs cut mid-character: continuation bytes dropped, lone lead
    bytes inserted, the end cut anywhere; specials and out-of-vocabulary ids mixed in."""
    tok = info.tokenizer
    ids = tok.encode(body, add_special_tokens=False).ids
    byte_of = byte_values(tok)
    of_byte = {b: i for i, b in byte_of.items()}
    for _ in range(data.draw(st.integers(0, 3), label="cuts")):
        cont = [j for j, i in enumerate(ids) if byte_of.get(i, 0) & 0xC0 == 0x80]
        if cont:
            del ids[data.draw(st.sampled_from(cont), label="drop continuation")]
    for _ in range(data.draw(st.integers(0, 2), label="leads")):
        pos = data.draw(st.integers(0, len(ids)), label="lead pos")
        ids.insert(pos, of_byte[data.draw(st.sampled_from([0xE6, 0xF0, 0xC3, 0x20, 0x9F]))])
    extra = st.one_of(st.sampled_from(sorted(info.special_ids)),
                      st.sampled_from([-1, info.vocab_size]))
    for _ in range(data.draw(st.integers(0, 2), label="extras")):
        ids.insert(data.draw(st.integers(0, len(ids)), label="pos"), data.draw(extra))
    return ids[:data.draw(st.integers(0, len(ids)), label="length cut")]


def attributed_request(info: TokenizerInfo, rows: list[list[int]], skip: bool,
                       decoder: RowDecoder | None = None
                       ) -> tuple[str, list[tuple[int, int, int]]]:
    """Text and attributions of a request, offsets made absolute (UTF-8 bytes)."""
    req = Request("r", info, Open("r", attribution=True, skip_special_tokens=skip), decoder)
    text, out = "", []
    rows = rows or [[]]
    for n, row in enumerate(rows):
        d = req.row(row, Length(1) if n == len(rows) - 1 else None,
                    1, 0, 0)
        assert d is not None
        base = len(text.encode("utf-8"))
        out += [(t, k, base + off) for t, k, off in d.attributions or []]
        text += d.text
    return text, out


def as_reported(info: TokenizerInfo, anchors: list[tuple[int, int, int]]
                ) -> list[tuple[int, int, int]]:
    """The oracle's anchors as the service names their ids: one outside the vocabulary as
    `vocab_size`, the id the decoder saw (protocol section 10)."""
    v = info.vocab_size
    return [(t if 0 <= t < v else v, k, off) for t, k, off in anchors]


@pytest.mark.parametrize("which", ["family", "window"])
@pytest.mark.parametrize("name", FALLBACK)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=rare_text, data=st.data(), sizes=chunk_sizes, skip=st.booleans())
def test_byte_run_attribution_matches_per_character_oracle(
        name: str, which: str, body: str, data: st.DataObject, sizes: list[int],
        skip: bool) -> None:
    """Each byte id at the start of its character (or of its own U+FFFD), the id that ends
    a run at the start of its own text: what replaying the ids one by one gives. The
    byte-fallback family and the window family (any chain with byte ids) alike."""
    info = info_for(name)
    tok = info.tokenizer
    ids = byte_run_ids(info, data, body)
    text, got = attributed_request(info, chunk(ids, sizes), skip, decoder_of(name, which))
    want_text, want = oracle_anchors(tok, ids, skip, info.special_ids, byte_values(tok))
    assert text == want_text == reference(tok, [], ids, skip)
    assert got == as_reported(info, to_bytes(want_text, want))


@pytest.mark.parametrize("which", ["family", "window"])
@pytest.mark.parametrize("name", FALLBACK)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=rare_text, data=st.data(), sizes=st.lists(st.integers(1, 4), min_size=1, max_size=50),
       skip=st.booleans())
def test_only_an_open_byte_run_is_held(name: str, which: str, body: str, data: st.DataObject,
                                       sizes: list[int], skip: bool) -> None:
    """After every row (1-4 ids, as speculative decoding sends) the text is the full decode
    up to the open byte run, so outside runs it is never behind DecodeStream."""
    info = info_for(name)
    tok = info.tokenizer
    ids = byte_run_ids(info, data, body)
    drop = info.special_ids if skip else frozenset()
    push, flush = decoding(info, skip, decoder=decoder_of(name, which))
    ds = DecodeStream(skip_special_tokens=skip)
    ours = theirs = ""
    ds_ok = True
    kept: list[int] = []
    for row in chunk(ids, sizes):
        ours += push(row)
        kept += [i for i in row if 0 <= i < info.vocab_size and i not in drop]
        s = len(kept)
        while s and kept[s - 1] in info.byte_fallback_ids:
            s -= 1
        final = tok.decode(kept[:s], skip_special_tokens=False)
        assert ours == final
        if ds_ok:
            try:
                theirs += "".join(ds.step(tok, i) or "" for i in row if 0 <= i < info.vocab_size)
            except Exception:
                ds_ok = False
            else:
                assert len(ours) >= min(len(theirs), len(final))
    assert ours + flush() == reference(tok, [], ids, skip)


def test_decodestream_fails_on_a_run_cut_mid_character_and_the_service_is_exact() -> None:
    """ids for `a`, the four bytes of U+1F6B6, the first two of another emoji, then ` b`:
    DecodeStream shows the emoji, then raises when the run turns into U+FFFD."""
    info = info_for("metaspace_byte_fallback")
    tok = info.tokenizer
    of_byte = {b: i for i, b in byte_values(tok).items()}
    run = [of_byte[b] for b in "🚶".encode() + "😀".encode()[:2]]
    ids = tok.encode("a", add_special_tokens=False).ids + run + \
        tok.encode(" b", add_special_tokens=False).ids
    full = tok.decode(ids)
    assert "🚶" not in full and full.count("\ufffd") == 6
    ds = DecodeStream(skip_special_tokens=True)
    with pytest.raises(Exception, match="Invalid prefix"):
        for i in ids:
            ds.step(tok, i)
    text, got = attributed_request(info, [[i] for i in ids], True)
    assert text == full
    want_text, want = oracle_anchors(tok, ids, True, info.special_ids, byte_values(tok))
    assert got == as_reported(info, to_bytes(want_text, want))
    # each byte of the invalid run at its own U+FFFD, ` b` right after the six of them
    starts = [off for tid, _, off in got]
    a = len(tok.decode(ids[:2]).encode())
    assert starts[2:8] == [a + 3 * k for k in range(6)] and starts[8] == a + 18


def test_byte_ids_of_a_character_share_its_offset_and_the_ending_id_its_own() -> None:
    """U+1F6B6 as four byte ids, then the ordinary U+FE0F token: the byte ids at the
    emoji's first byte, U+FE0F four bytes later, in the same delta."""
    info = info_for("metaspace_byte_fallback")
    tok = info.tokenizer
    # built id by id: what the trainer merges (is U+FE0F a token of its own?) may vary
    walk = [tok.token_to_id(f"<0x{b:02X}>") for b in "🚶".encode()]
    assert all(i in info.byte_fallback_ids for i in walk)
    fe0f = tok.encode("\ufe0f", add_special_tokens=False).ids
    letter = min(t for t in tok.get_vocab() if len(t) == 1 and t.isascii() and t.isalpha())
    end, end_text = ((fe0f[-1], "\ufe0f") if len(fe0f) == 1 and fe0f[0] not in info.byte_fallback_ids
                     else (tok.token_to_id(letter), letter))
    ids = [*tok.encode("a", add_special_tokens=False).ids, *walk, end,
           *tok.encode(" b", add_special_tokens=False).ids]
    assert tok.decode(ids).startswith("a🚶" + end_text)
    req = Request("r", info, Open("r", attribution=True))
    deltas = [req.row([i], None, 1, 0, 0) for i in ids]
    emoji_delta = next(d for d in deltas if d is not None and "🚶" in d.text)
    assert emoji_delta.text == "🚶" + end_text
    assert [off for _, _, off in emoji_delta.attributions or []] == [0, 0, 0, 0, 4]


def test_row_ending_in_a_byte_id_releases_the_text_before_it() -> None:
    """`情 ` then the first byte of a newline-free run in one row: the text is not held."""
    info = info_for("metaspace_byte_fallback")
    tok = info.tokenizer
    ids = tok.encode("情 情", add_special_tokens=False).ids
    cut = len(ids) - 2  # inside the second 情's byte run
    for which in ("family", "window"):
        push, flush = decoding(info, decoder=decoder_of("metaspace_byte_fallback", which))
        assert push(ids[:cut]) == tok.decode(ids[:cut - 1])
        assert push(ids[cut:]) + flush() == tok.decode(ids)[len(tok.decode(ids[:cut - 1])):]


def test_window_stays_bounded_when_rows_end_inside_runs() -> None:
    """Rows that always end with a byte id still slide the window (behind the open run)."""
    info = info_for("metaspace_byte_fallback")
    tok = info.tokenizer
    ids = tok.encode("ᚠ " * 300, add_special_tokens=False).ids
    assert all(i in info.byte_fallback_ids for i in ids[1:4])  # ▁, then ᚠ as 3 byte ids
    window = window_for("metaspace_byte_fallback")
    state = one_slot(window)
    out = [window.push(state, 0, ids[k:k + 4]) for k in range(0, len(ids), 4)]
    assert len(state.windows[0].ids) < 64
    out += window.flush(state, [0], np.zeros(1, np.int64))[1]
    assert "".join(out) == tok.decode(ids)


@pytest.mark.parametrize("which", ["family", "window"])
@pytest.mark.parametrize("name", FALLBACK)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=rare_text, data=st.data(), sizes=chunk_sizes, skip=st.booleans(),
       stream=st.booleans(), include=st.booleans())
def test_byte_run_attribution_with_prompts_and_stops_keeps_one_per_id(
        name: str, which: str, body: str, data: st.DataObject, sizes: list[int], skip: bool,
        stream: bool, include: bool) -> None:
    """Prompts ending inside a run, stop strings cutting through one, stream=false: every
    id still gets exactly one attribution, in push order, inside its delta's text."""
    info = info_for(name)
    ids = byte_run_ids(info, data, body)
    split = data.draw(st.integers(0, len(ids)), label="prompt split")
    prompt, gen = ids[:split], ids[split:]
    stop = data.draw(st.lists(st.sampled_from(["\ufffd", "🚶", " b", "情", "ᚠᛇ", "x"]),
                              max_size=2), label="stop")
    req = Request("r", info, Open("r", attribution=True, skip_special_tokens=skip,
                                  prompt_ids=prompt, stop=stop, stream=stream,
                                  include_stop_str_in_output=include), decoder_of(name, which))
    rows = chunk(gen, sizes) or [[]]
    got, consumed = [], []
    for n, row in enumerate(rows):
        d = req.row(row, Length(1) if n == len(rows) - 1 else None,
                    1, 0, 0)
        consumed += [t if 0 <= t < info.vocab_size else info.vocab_size for t in row]
        if d is None:
            continue
        size = len(d.text.encode("utf-8"))
        for tid, kind, off in d.attributions or []:
            assert 0 <= off <= size and (kind == 1 or off < size)
            got.append(tid)
        if d.finish is not None:
            break
    assert got == consumed


@pytest.mark.parametrize("name", FALLBACK)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=rare_text, data=st.data(), sizes=chunk_sizes, skip=st.booleans(),
       stream=st.booleans())
def test_byte_fallback_and_window_requests_give_the_same_deltas(
        name: str, body: str, data: st.DataObject, sizes: list[int], skip: bool,
        stream: bool) -> None:
    """The byte-fallback family's decoder and the window's, one rule for runs: a per-row
    request's deltas (texts, attributions, finish) are the same on either, with prompts
    ending inside a run, stop strings and a scheduler-matched stop string."""
    info = info_for(name)
    ids = byte_run_ids(info, data, body)
    split = data.draw(st.integers(0, len(ids)), label="prompt split")
    stop = data.draw(st.lists(st.sampled_from(["\ufffd", "🚶", " b", "情", "x"]), max_size=2),
                     label="stop")
    matched = data.draw(st.sampled_from(["\ufffd", "b", "情 "]), label="matched")
    opts = Open("r", attribution=True, skip_special_tokens=skip, prompt_ids=ids[:split],
                stop=stop, stream=stream)
    rows = chunk(ids[split:], sizes) or [[]]
    views = []
    for which in ("family", "window"):
        req = Request("r", info, opts, decoder_of(name, which))
        view = []
        for n, row in enumerate(rows):
            d = req.row(row, Stop(matched) if n == len(rows) - 1
                        else None, 1, 0, 0)
            if d is not None:
                view.append((d.text, d.attributions, d.finish))
                if d.finish is not None:
                    break
        views.append(view)
    assert views[0] == views[1]


@pytest.mark.parametrize("base", ["byte_level_bpe", "metaspace_byte_fallback_bpe",
                                  "unigram_byte_fallback", "wordpiece"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=text, data=st.data(), sizes=chunk_sizes)
def test_a_parsers_markers_stay_while_other_specials_are_skipped(
        base: str, body: str, data: st.DataObject, sizes: list[int]) -> None:
    """A parser's markers that are special tokens are kept under skip_special_tokens (a
    further id table of the family, `start`'s `keep`), every other special dropped."""
    from sglang_tok.parsers import marker_token_ids

    markers = ("<think>", "</think>", "<tool_call>")
    info = zoo.with_markers(markers, f"markers-{base}", base)
    keep = marker_token_ids(info, markers)
    assert keep
    ids = info.tokenizer.encode(body, add_special_tokens=False).ids
    specials = sorted(info.special_ids)
    for _ in range(data.draw(st.integers(0, 6), label="specials")):
        ids.insert(data.draw(st.integers(0, len(ids)), label="at"),
                   data.draw(st.sampled_from(specials), label="special"))
    push, flush = decoding(info, True, keep=keep)
    got = "".join(push(row) for row in chunk(ids, sizes)) + flush()
    kept = [i for i in ids if i not in info.special_ids or i in keep]
    assert got == info.tokenizer.decode(kept, skip_special_tokens=False)
