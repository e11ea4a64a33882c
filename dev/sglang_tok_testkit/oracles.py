"""Slow, obviously-correct references that the fast paths are tested and measured against.

`oracle_anchors` replays ids one at a time through a full `decode` and anchors each id at
the start of the character its text helped complete (the attribution contract of
protocol section 5); `scripts/bench/fallback.py` and `tests/shard/test_decoder.py` both use it.
"""

from __future__ import annotations

from tokenizers import Tokenizer


def byte_values(tok: Tokenizer) -> dict[int, int]:
    out = {}
    for b in range(256):
        tid = tok.token_to_id(f"<0x{b:02X}>")
        if tid is not None:
            out[tid] = b
    return out


def final_lengths(tok: Tokenizer, kept: list[int], byte_of: dict[int, int]) -> list[int]:
    """Characters of text final after each prefix kept[:m], knowing how each byte run ends.

    A byte run decodes all-or-nothing: valid UTF-8 gives its characters, anything else one
    U+FFFD per byte. So inside a run that will turn out valid, the text up to the last
    complete character is final; inside one that will not, each byte is one U+FFFD.
    """
    out = [0]
    m, n = 1, len(kept)
    while m <= n:
        if kept[m - 1] not in byte_of:
            out.append(len(tok.decode(kept[:m], skip_special_tokens=False)))
            m += 1
            continue
        s = m - 1
        e = m
        while e < n and kept[e] in byte_of:
            e += 1
        run = bytes(byte_of[i] for i in kept[s:e])
        head = len(tok.decode(kept[:s], skip_special_tokens=False)) if s else 0
        try:
            run.decode("utf-8")
            valid = True
        except UnicodeDecodeError:
            valid = False
        for j in range(e - s):  # kept[:s + j + 1]
            if not valid:
                out.append(head + j + 1)
                continue
            b = j + 1
            while b > 0 and (b < len(run) and (run[b] & 0xC0) == 0x80):
                b -= 1  # back to a character boundary
            out.append(len(tok.decode(kept[:s + b], skip_special_tokens=False)) if s + b
                       else 0)
        m = e + 1
    return out


def oracle_anchors(tok: Tokenizer, ids: list[int], skip: bool, special: frozenset[int],
                   byte_of: dict[int, int]) -> tuple[str, list[tuple[int, int, int]]]:
    """Replay ids one by one: an id is pending until text becomes final, then it is anchored
    where that newly final text begins; a skipped special is zero-width at the final text's
    end; ids still pending at the end are zero-width there. Char offsets into the text.
    """
    vocab = tok.get_vocab_size()
    drop = special if skip else frozenset()
    kept = [i for i in ids if 0 <= i < vocab and i not in drop]
    lengths = final_lengths(tok, kept, byte_of)
    text = tok.decode(kept, skip_special_tokens=False)
    out: list[tuple[int, int, int]] = []
    pending: list[int] = []
    k = 0
    for tid in ids:
        if tid in drop:
            out.append((tid, 1, lengths[k]))
            continue
        out.append((tid, 0, -1))
        pending.append(len(out) - 1)
        if 0 <= tid < vocab:
            k += 1
            if lengths[k] > lengths[k - 1]:
                for p in pending:
                    out[p] = (out[p][0], 0, lengths[k - 1])
                pending.clear()
    for p in pending:
        out[p] = (out[p][0], 1, len(text))
    return text, out


def to_bytes(text: str, anchors: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    return [(t, k, len(text[:a].encode("utf-8"))) for t, k, a in anchors]


# ------------------------------------------------------------------ implementations
