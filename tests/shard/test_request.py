"""Per-request rules: stops, attribution, usage, stream=false, logprob texts."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import chunk, chunk_sizes, text

from sglang_tok.finish import Finish, Length, Stop
from sglang_tok.protocols.model.control import Open
from sglang_tok.protocols.model.deltas import Delta
from sglang_tok.tokenizer import TokenizerInfo, load
from shards.messages.request import Request

INFO: TokenizerInfo = load("deepseek-v4")
TOK = INFO.tokenizer
EOS = 1


def enc(s: str) -> list[int]:
    return TOK.encode(s, add_special_tokens=False).ids


def feed(req: Request, chunks: list[list[int]], finish: Finish | None = None,
         **kw: Any) -> list[Delta]:
    out = []
    for n, c in enumerate(chunks):
        last = n == len(chunks) - 1
        d = req.row(c, finish if last else None, 5, 1, 0, **kw)
        if d is not None:
            out.append(d)
        if d is not None and d.finish is not None:
            break
    return out


def joined(deltas: list[Delta]) -> str:
    return "".join(d.text for d in deltas)


def expected_stop(full: str, stops: list[str], include: bool) -> tuple[str, str | None]:
    best = None
    for s in sorted(set(stops), key=len):
        at = full.find(s)
        if at >= 0 and (best is None or at < best[0]):
            best = (at, s)
    if best is None:
        return full, None
    return full[:best[0]] + (best[1] if include else ""), best[1]


@settings(max_examples=200, deadline=None)
@given(body=text, sizes=chunk_sizes, data=st.data(), include=st.booleans())
def test_service_stop_strings_cut_at_earliest_match_for_any_chunking(
        body: str, sizes: list[int], data: st.DataObject, include: bool) -> None:
    ids = enc(body)
    full = TOK.decode(ids)
    n = data.draw(st.integers(1, 3))
    stops = []
    for _ in range(n):
        if full and data.draw(st.booleans()):
            a = data.draw(st.integers(0, len(full) - 1))
            stops.append(full[a:a + data.draw(st.integers(1, 6))])
        else:
            stops.append(data.draw(st.text(min_size=1, max_size=4)))
    req = Request("r", INFO, Open("r", stop=stops, include_stop_str_in_output=include))
    chunks = chunk(ids, sizes) or [[]]
    deltas = feed(req, chunks, Length(len(ids)))
    want, matched = expected_stop(full, stops, include)
    assert joined(deltas) == want
    assert deltas[-1].finish is not None
    if matched is not None:
        assert deltas[-1].finish == Stop(matched)
    # before the end, at most max(len(stop)) - 1 characters are held back (plus one
    # incomplete UTF-8 character inside the decoder)
    longest = max(map(len, stops))
    emitted, consumed = "", []
    for d, c in zip(deltas[:-1], chunks):
        emitted += d.text
        consumed += c
        so_far = TOK.decode(consumed)
        held = len(so_far) - len(emitted) - (1 if so_far.endswith("\ufffd") else 0)
        assert held <= longest - 1


def test_stop_holdback_releases_when_the_candidate_fails() -> None:
    req = Request("r", INFO, Open("r", stop=["STOP"]))
    d1 = req.row(enc("hello ST"), None, 1, 0, 0)
    assert d1 is not None and d1.text == "hello " and d1.finish is None
    d2 = req.row(enc("ay"), None, 1, 0, 0)
    assert d2 is not None and d2.text == "STay"
    d3 = req.row(enc(" STOP and more"), None, 1, 0, 0)
    assert d3 is not None and d3.text == " " and d3.finish == Stop("STOP")


def test_scheduler_stop_token_is_left_out_unless_no_stop_trim() -> None:
    ids = enc("Hi there") + [EOS]
    fin = Stop(EOS)
    req = Request("r", INFO, Open("r", skip_special_tokens=False))
    assert joined(feed(req, [ids], fin)) == "Hi there"
    req = Request("r", INFO, Open("r", skip_special_tokens=False, no_stop_trim=True))
    assert joined(feed(req, [ids], fin)) == "Hi there<｜end▁of▁sentence｜>"
    req = Request("r", INFO, Open("r", skip_special_tokens=False))
    d = feed(req, [ids], Stop([7, EOS]))
    assert joined(d) == "Hi there" and d[-1].ids == ids  # ids are never trimmed


def test_scheduler_stop_string_cut_at_last_occurrence() -> None:
    ids = enc("a\n\nb\n\n")
    req = Request("r", INFO)
    d = feed(req, [ids], Stop("\n\n"))
    assert joined(d) == "a\n\nb"
    req = Request("r", INFO, Open("r", no_stop_trim=True))
    assert joined(feed(req, [ids], Stop("\n\n"))) == "a\n\nb\n\n"
    # stream=false: the cut may reach into earlier rows
    req = Request("r", INFO, Open("r", stream=False))
    d = feed(req, [[i] for i in ids], Stop("\n\n"))
    assert len(d) == 1 and d[0].text == "a\n\nb" and d[0].ids == ids


def test_one_delta_per_row_even_when_empty_and_usage() -> None:
    req = Request("r", INFO, Open("r", continuous_usage=True))
    ids = enc("世")  # one id, but check a byte split too
    lead = TOK.token_to_id("ä")  # 0xE4 alone: no text yet
    d1 = req.row([lead], None, 10, 4, 0)
    assert d1 is not None and d1.text == "" and d1.usage is not None
    assert d1.usage.completion_tokens == 1 and d1.usage.total_tokens == 11
    d2 = req.row(ids, Length(2), 10, 4, 2)
    assert d2 is not None and d2.usage is not None and d2.usage.completion_tokens == 2
    assert d2.usage.cached_tokens == 4 and d2.usage.reasoning_tokens == 2
    assert d1.text + d2.text == TOK.decode([lead] + ids)
    req = Request("q", INFO)
    d = req.row(ids, None, 1, 0, 0)
    assert d is not None and d.usage is None  # only the last delta without continuous_usage


def test_stream_false_gives_one_delta_with_everything() -> None:
    req = Request("r", INFO, Open("r", stream=False, logprob_text=True))
    ids = enc("one two three")
    out = []
    for n, i in enumerate(ids):
        fin = Length(3) if n == len(ids) - 1 else None
        out.append(req.row([i], fin, 1, 0, 0, logprobs=[(-0.5, i)], top=[[(i, -0.5)]]))
    assert out[:-1] == [None] * (len(ids) - 1)
    last = out[-1]
    assert last is not None and last.text == "one two three" and last.ids == ids
    assert last.logprobs == [(-0.5, i) for i in ids]
    assert last.token_texts == [TOK.decode([i]) for i in ids]
    assert last.top_texts == [[TOK.decode([i])] for i in ids]


def test_logprob_texts_use_skip_special_false() -> None:
    req = Request("r", INFO, Open("r", logprob_text=True))
    d = req.row([EOS], None, 1, 0, 0, logprobs=[(-1.0, EOS)], top=[[(EOS, -1.0), (2**31 - 1, -2.0)], None])
    assert d is not None and d.token_texts == ["<｜end▁of▁sentence｜>"]
    assert d.top_texts == [["<｜end▁of▁sentence｜>", ""], None]


# ------------------------------------------------------------------ attribution
def attributed(chunks: list[list[int]], finish: Finish | None = None,
               **opts: Any) -> list[Delta]:
    req = Request("r", INFO, Open("r", attribution=True, **opts))
    return feed(req, chunks, finish or Length(1))


def test_character_split_across_three_byte_tokens() -> None:
    a, b, c = (TOK.token_to_id(ch) for ch in "ä¸ĸ")  # E4 B8 96 = 世
    d = attributed([[a], [b], [c, *enc("x")]])
    assert [x.text for x in d] == ["", "", "世x"]
    assert d[0].attributions == [] and d[1].attributions == []
    # all three byte tokens become visible at the start of 世, x right after it (3 bytes)
    assert d[2].attributions == [(a, 0, 0), (b, 0, 0), (c, 0, 0), (enc("x")[0], 0, 3)]


def test_special_inside_a_byte_group_is_zero_width() -> None:
    a, b, c = (TOK.token_to_id(ch) for ch in "ä¸ĸ")
    d = attributed([[a, EOS, b, c]])
    assert d[0].text == "世"
    assert d[0].attributions == [(a, 0, 0), (EOS, 1, 0), (b, 0, 0), (c, 0, 0)]


def test_every_id_gets_one_attribution_in_push_order() -> None:
    ids = enc("Hello 世界 🙂!") + [EOS] + [10**9]
    d = attributed([[i] for i in ids])
    flat = [a for x in d for a in (x.attributions or [])]
    # an id outside the vocabulary is named as the decoder saw it (protocol section 10)
    assert [a[0] for a in flat] == ids[:-1] + [INFO.vocab_size]
    for x in d:
        nbytes = len(x.text.encode())
        for _tid, kind, off in x.attributions or []:
            assert 0 <= off <= nbytes and (kind == 1 or off < nbytes)
    assert flat[-1][1] == 1  # out-of-vocabulary id pending at the end: zero-width


def test_holdback_releases_attributions_with_their_text() -> None:
    ids = enc("abc ST") + enc("X")
    d = attributed([[i] for i in ids], stop=["STOP"])
    texts = [x.text for x in d]
    assert "".join(texts) == "abc STX"
    for x in d:
        for _, kind, off in x.attributions or []:
            assert off < len(x.text.encode()) or (kind == 1 and off == len(x.text.encode()))
    assert sum(len(x.attributions or []) for x in d) == len(ids)


def test_stop_cut_turns_anchors_past_it_into_zero_width() -> None:
    ids = enc("keep STOP gone")
    d = attributed([ids], stop=["STOP"])
    assert d[0].text == "keep " and d[0].finish == Stop("STOP")
    attrs = d[0].attributions or []
    assert len(attrs) == len(ids)
    for _tid, _kind, off in attrs:
        assert off <= len("keep ")
    assert all(kind == 1 and off == 5 for _, kind, off in attrs if off == 5)


@pytest.mark.parametrize("include", [False, True])
def test_attribution_offsets_are_utf8_bytes_local_to_delta(include: bool) -> None:
    ids = enc("é€x")
    d = attributed([[i] for i in ids], stop=["x"], include_stop_str_in_output=include)
    text = "".join(x.text for x in d)
    assert text == ("é€x" if include else "é€")
    for x in d:
        for _tid, _kind, off in x.attributions or []:
            assert off <= len(x.text.encode())


@pytest.mark.parametrize("rows", [1, 3])
def test_kept_stop_string_cut_after_it_when_asked(rows: int) -> None:
    """OPEN trim_after_stop (SGLang 0.5.14 on, with no_stop_trim): the matched stop string
    stays, the text after its last occurrence goes; without it the whole text stays."""
    ids = enc("one, two. three")
    assert INFO.tokenizer.decode(ids[-1:]) == " three"  # the row the scheduler matched in
    chunks = [ids] if rows == 1 else [ids[:2], ids[2:-1], ids[-1:]]
    req = Request("r", INFO, Open("r", no_stop_trim=True, trim_after_stop=True))
    assert joined(feed(req, chunks, Stop("th"))) == "one, two. th"
    req = Request("r", INFO, Open("r", no_stop_trim=True))
    assert joined(feed(req, chunks, Stop("th"))) == "one, two. three"
    # stream=false: the one delta ends at the stop string too
    req = Request("r", INFO, Open("r", no_stop_trim=True, trim_after_stop=True, stream=False))
    d = feed(req, chunks, Stop("e"))
    assert len(d) == 1 and d[0].text == "one, two. three" and d[0].ids == ids
    req = Request("r", INFO, Open("r", no_stop_trim=True, trim_after_stop=True, stream=False))
    assert feed(req, chunks, Stop(", t"))[0].text == "one, t"


def test_trim_after_stop_is_never_encoded_unless_set() -> None:
    """A new OPEN option: an OPEN that does not set it encodes as it did."""
    import msgspec
    assert b"trim_after_stop" not in msgspec.msgpack.encode(Open("r", no_stop_trim=True))
    got = msgspec.msgpack.decode(msgspec.msgpack.encode(Open("r", trim_after_stop=True)),
                                 type=Open)
    assert got.trim_after_stop is True
