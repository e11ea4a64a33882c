"""What the benchmark and load scripts share: timers, statistics, corpora, tokenizers,
processes, the shard's input as the egress routes it, and tables of figures and ratios.

Scripts import it as `common` (the scripts' folder is first on `sys.path` when one runs).
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import psutil

from sglang_tok.harness.workload import BUILTIN_TEXTS
from sglang_tok.protocols.native import batch as native_batch

if TYPE_CHECKING:  # the tokenizer builders import `tokenizers` when called
    from tokenizers import Tokenizer

    from ring.link import Arrays

# ------------------------------------------------------------------------------ timing
Clock = Callable[[], float]


def best(fn: Callable[[], object], repeat: int, setup: Callable[[], object] | None = None,
         clock: Clock = time.thread_time) -> float:
    """The least time of `repeat` runs of `fn` (CPU time of this thread by default: the
    machine is shared), each after `setup` and a garbage collection, neither timed."""
    times = []
    for _ in range(repeat):
        if setup is not None:
            setup()
        gc.collect()
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return min(times)


K = TypeVar("K")


def interleaved(cases: Mapping[K, Callable[[], float]], rounds: int) -> dict[K, list[float]]:
    """Each round runs every case once, in order, so that every case sees the same machine;
    a case returns its own figure (a time, a rate). Per case, its figures in round order."""
    out: dict[K, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, case in cases.items():
            out[name].append(case())
    return out


def timed(fn: Callable[[], object], clock: Clock = time.perf_counter) -> Callable[[], float]:
    """`fn` as a case of `interleaved`: it returns the seconds one run took."""
    def case() -> float:
        t0 = clock()
        fn()
        return clock() - t0
    return case


# -------------------------------------------------------------------------- statistics
def percentile(xs: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by rank; NaN for no samples."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def ratio(a: float, b: float) -> float:
    """a / b; NaN where b is 0 or NaN (a figure of a system that was not run)."""
    return a / b if b and b == b else float("nan")


def times(x: float, digits: int = 2) -> str:
    """A ratio as `1.23x`, or `-` where it is NaN."""
    return f"{x:.{digits}f}x" if x == x else "-"


# ----------------------------------------------------------------------------- tables
def markdown(head: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table; cells are printed as given (format them first)."""
    lines = [markdown_row(head), "|" + "---|" * len(head)]
    lines += [markdown_row(row) for row in rows]
    return "\n".join(lines)


def markdown_row(cells: Sequence[object]) -> str:
    """One row of a Markdown table (for tables printed a row at a time)."""
    return "| " + " | ".join(map(str, cells)) + " |"


def ratio_table(figures: Mapping[str, float], base: str, heading: tuple[str, str],
                fmt: str = ",.0f", width: int = 20, suffix: str = "") -> str:
    """One line per case: its figure and its ratio to `base`'s (`heading`: the case and
    figure columns' titles; `suffix`: a unit or a word after each ratio)."""
    ref = figures[base]
    lines = [f"{heading[0]:<{width}} {heading[1]:>22} {'ratio':>8}"]
    for name, x in figures.items():
        lines.append(f"{name:<{width}} {x:>22{fmt}} {times(ratio(x, ref)):>8}{suffix}")
    return "\n".join(lines)


def write_json(path: str | Path, obj: Any) -> None:
    """The figures as JSON at `path`, its folder made if need be."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(obj, indent=1))


def span(text: str) -> tuple[int, int]:
    """`k` or `lo-hi` as (lo, hi)."""
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


# ---------------------------------------------------------------------------- corpora
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


# ------------------------------------------------------------------------- tokenizers
def llama2_style(vocab_size: int = 4000) -> Tokenizer:
    """A Llama-2-style SentencePiece BPE trained on faker text in ten languages (Metaspace
    normalizer, BPE with byte_fallback and the 256 <0xNN> tokens, the HF decoder chain):
    rare characters and most emoji fall back to bytes."""
    from tokenizers import Tokenizer, models, normalizers, trainers

    from sglang_tok.harness.zoo import sentencepiece_decoder, with_byte_tokens
    tok = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    tok.decoder = sentencepiece_decoder()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"],
                                  limit_alphabet=1500, show_progress=False)
    tok.train_from_iterator(faker_texts(1, 60, 400, LOCALES_LLAMA2), trainer)
    return with_byte_tokens(tok)


# ----------------------------------------------------------------------- lean peer
def batch_rows(frame: bytes) -> list[tuple[str, list[int]]]:
    """A BATCH frame's rows: (rid, ids) in order."""
    b = native_batch.decode_batch(frame)
    ids, st = b.token_ids(), b.tokens.row_starts
    return [(rid, ids[st[i]:st[i + 1]]) for i, rid in enumerate(b.rids)]


def decodestream_rows(tok: Tokenizer, frames: Iterable[list[tuple[str, list[int]]]]) -> None:
    """The lean peer's work on frames of rows: one `tokenizers` DecodeStream per rid,
    stepped once per id; where a step raises (a byte run cut mid-character), that rid's
    stream starts again."""
    from tokenizers.decoders import DecodeStream

    streams: dict[str, DecodeStream] = {}
    for rows in frames:
        for rid, ids in rows:
            ds = streams.get(rid)
            if ds is None:
                ds = streams[rid] = DecodeStream(skip_special_tokens=True)
            for i in ids:
                try:
                    ds.step(tok, i)
                except Exception:
                    streams[rid] = ds = DecodeStream(skip_special_tokens=True)


def route_arrays(batches: Iterable[native_batch.Batch], rids: Iterable[str] = ()) -> list[Arrays]:
    """The frames as the egress routes them to one shard (ARRAYS messages), `rids` opened
    first; done before any clock starts, since the egress is another process."""
    from ring import link
    from sglang_tok.harness.local_route import LocalRoute

    route = LocalRoute(1)
    for rid in rids:
        route.open(rid)
    msgs = []
    for batch in batches:
        for raw in route(batch).values():
            msg = link.parse(raw)
            assert isinstance(msg, link.Arrays)
            msgs.append(msg)
    return msgs


# -------------------------------------------------------------------------- processes
def workdir(prefix: str) -> Path:
    """A fresh folder, removed when the process exits whichever way it ends."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path


def tree_pids(*roots: int) -> list[int]:
    """These processes and all their descendants (those still alive)."""
    out = []
    for pid in roots:
        try:
            proc = psutil.Process(pid)
            out += [pid] + [c.pid for c in proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return out


def cpu_seconds(pids: Iterable[int], per: dict[str, list[float]] | None = None) -> float:
    """User + system CPU seconds of these processes; `per` collects each one's, by its
    title."""
    total = 0.0
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            t = proc.cpu_times()
            total += t.user + t.system
            if per is not None:
                title = " ".join(proc.cmdline()[:1]) or str(pid)
                per.setdefault(title, []).append(t.user + t.system)
        except psutil.NoSuchProcess:
            pass
    return total


def wait_for_file(path: Path, proc: subprocess.Popen[bytes], timeout: float, what: str) -> None:
    """Until `proc` creates `path`; kills it and raises if it exits or the time runs out."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{what} failed to start")
        time.sleep(0.05)


def terminate(proc: subprocess.Popen[bytes], timeout: float = 30, group: bool = False) -> None:
    """SIGTERM, then SIGKILL (to its process group with `group`) if it has not exited in
    `timeout` seconds."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait()
