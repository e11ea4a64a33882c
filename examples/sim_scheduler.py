"""A simulated scheduler: "generates" realistic token streams at a realistic step pace.

It stands where SGLang's scheduler stands. Every step (default 25 ms) it pushes ONE BATCH
frame holding the next id of every live request, through the kit's writer
(`sglang_tok.kit.scheduler.Scheduler.step`), as a scheduler's decode loop does. What a request
generates is a deterministic function of its seed: replayed multilingual text, code,
markdown and emoji, tokenized with the service's own tokenizer, so a client can be checked
against the full decode of exactly those ids (`Generation.expected_text`).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from array import array
from dataclasses import dataclass, field
from typing import Any

from sglang_tok.kit.scheduler import Scheduler
from sglang_tok.kit.tool_calls import glm_call, minimax_invoke, qwen3_coder_call
from sglang_tok.kit.workload import BUILTIN_TEXTS
from sglang_tok.tokenizer import TokenizerInfo

TEXTS = [
    *BUILTIN_TEXTS,
    "Der Detokenisierer setzt Bytes zusammen, bis ein vollständiges Zeichen entsteht: "
    "Umlaute wie ä, ö, ü und das ß dürfen nie halb erscheinen.",
    "Le serveur renvoie chaque fragment dès qu'il est prêt ; les accents (é, è, ê, ç) "
    "arrivent entiers, jamais coupés en deux octets.",
    "El modelo genera una respuesta token a token, y cada fragmento llega al cliente en "
    "orden, con tildes y eñes intactas. ¿Verdad? ¡Claro!",
    "한국어 문장도 음절 단위로 정확하게 복원되어야 합니다. 토큰 경계는 글자 경계와 다릅니다.",
    "Η αποκωδικοποίηση πρέπει να είναι ακριβής για κάθε αίτημα, ακόμη και με τόνους.",
    "```python\nasync def stream(client, rid):\n    async for delta in client.stream(rid):\n"
    "        print(delta.text, end='', flush=True)\n```\n",
    "SELECT rid, count(*) AS deltas FROM output GROUP BY rid HAVING count(*) > 1;\n",
    "🚀 Launch checklist: ✅ tests 🟡 docs ❌ release — 👨‍💻👩‍🔬 on call, ☕ × 3, 🇯🇵🇧🇷🇳🇬",
    "Step 1: read the frame. Step 2: route each row by crc32(rid) % N. Step 3: decode.\n",
]
EOS = "<｜end▁of▁sentence｜>"


@dataclass
class Generation:
    """What one request will generate: its ids (EOS last when it ends on its own)."""

    ids: list[int]
    finish: dict[str, Any]
    prompt_tokens: int
    top_k: int = 0  # > 0: send output logprobs with this many alternatives per position
    stop: list[str] = field(default_factory=list)

    def text_ids(self) -> list[int]:
        """The ids whose decode is the text (a matched stop token is left out: rule 3)."""
        if self.finish.get("type") == "stop" and isinstance(self.finish.get("matched"), int):
            return self.ids[:-1]
        return self.ids

    def expected_text(self, info: TokenizerInfo) -> str:
        """The full decode, cut at the earliest OpenAI stop string (protocol rule 3)."""
        text = info.tokenizer.decode(self.text_ids(), skip_special_tokens=True)
        cuts = [at for at in (text.find(s) for s in self.stop if s) if at >= 0]
        return text[:min(cuts)] if cuts else text


class Generator:
    """Token streams seeded by the request: the same seed gives the same ids."""

    def __init__(self, info: TokenizerInfo, min_tokens: int = 32, max_tokens: int = 192) -> None:
        self.info = info
        self.corpus = [info.tokenizer.encode(t, add_special_tokens=False).ids for t in TEXTS]
        eos = info.tokenizer.token_to_id(EOS)
        self.eos = eos if eos is not None else min(info.special_ids, default=0)
        self.min_tokens, self.max_tokens = min_tokens, max_tokens

    def generate(self, seed: int, max_tokens: int | None, prompt_tokens: int, top_k: int = 0,
                 stop: list[str] | None = None, think: bool = False,
                 call: str = "") -> Generation:
        """`think`: a `<think>` block first; `call`: text of a tool call last (the model
        output a reasoning / tool-call parser splits; see `tool_call_text`)."""
        rng = random.Random(seed)
        natural = rng.randint(self.min_tokens, self.max_tokens)
        ids: list[int] = []
        while len(ids) < natural:
            ids.extend(rng.choice(self.corpus))
        ids = ids[rng.randrange(0, 3):][:natural]
        if think or call:
            enc = self.info.tokenizer.encode
            if think:
                reason = rng.choice(self.corpus)[:24]
                ids = [*enc("<think>\n", add_special_tokens=False).ids, *reason,
                       *enc("\n</think>\n\n", add_special_tokens=False).ids, *ids]
            if call:
                ids += enc(call, add_special_tokens=False).ids
        if max_tokens is not None and max_tokens <= len(ids):
            ids = ids[:max_tokens]
            finish: dict[str, Any] = {"type": "length", "length": len(ids)}
        else:
            ids.append(self.eos)
            finish = {"type": "stop", "matched": self.eos}
        return Generation(ids, finish, prompt_tokens, top_k, list(stop or []))


class _Live:
    __slots__ = ("gen", "pos")

    def __init__(self, gen: Generation) -> None:
        self.gen = gen
        self.pos = 0


class SimScheduler:
    """The decode loop: every `step_s`, one BATCH with the next ids of every live request."""

    def __init__(self, writer: Scheduler, step_s: float = 0.025, ids_per_step: int = 1) -> None:
        self.writer = writer
        self.step_s = step_s
        self.ids_per_step = ids_per_step
        self.live: dict[str, _Live] = {}
        self.steps = 0
        self.rows = 0
        self.late_steps = 0  # steps that started after their slot (the loop was behind)

    def add(self, rid: str, gen: Generation) -> None:
        """Schedule a request; its first row goes out in the next step."""
        self.live[rid] = _Live(gen)

    def drop(self, rid: str) -> None:
        """Stop generating for a rid (it ended at the frontend: stop string, abort)."""
        self.live.pop(rid, None)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            if self.live:
                self.step()
            next_at += self.step_s
            delay = next_at - loop.time()
            if delay < 0:  # behind: do not burst to catch up, as a real engine would not
                self.late_steps += bool(self.live)
                next_at = loop.time()
                delay = 0
            await asyncio.sleep(delay)

    def step(self) -> None:
        k = self.ids_per_step
        rids, ids, fins, prompts, done = [], [], [], [], []
        with_lp = False
        for rid, st in self.live.items():
            gen = st.gen
            a = st.pos
            st.pos = b = min(a + k, len(gen.ids))
            rids.append(rid)
            ids.append(array("q", gen.ids[a:b]))
            last = b == len(gen.ids)
            fins.append(gen.finish if last else None)
            prompts.append(gen.prompt_tokens)
            with_lp = with_lp or gen.top_k > 0
            if last:
                done.append(rid)
        extras = self._logprobs(ids) if with_lp else None
        self.writer.step(rids, ids, finish_reasons=fins, prompt_tokens=prompts, extras=extras)
        for rid in done:
            del self.live[rid]
        self.steps += 1
        self.rows += len(rids)

    def _logprobs(self, ids: list[array[int]]) -> dict[str, Any]:
        """Deterministic logprobs: the chosen id first, then `top_k - 1` neighbours."""
        vals: list[list[float] | None] = []
        idx: list[list[int] | None] = []
        tvals: list[Any] = []
        tidx: list[Any] = []
        for st, row in zip(self.live.values(), ids):
            k = st.gen.top_k
            if not k:
                vals.append(None)
                idx.append(None)
                tvals.append(None)
                tidx.append(None)
                continue
            lp = [-0.05 * (1 + t % 17) for t in row]
            vals.append(lp)
            idx.append(list(row))
            tvals.append([[v - 0.5 * q for q in range(k)] for v in lp])
            tidx.append([[t + q for q in range(k)] for t in row])
        return {"output_logprobs": (vals, idx), "output_top": (tvals, tidx)}


def tool_call_text(fmt: str, name: str, args: dict[str, Any]) -> str:
    """A tool call as a model in that format writes it ("" for a format not simulated)."""
    if fmt in ("deepseekv4", "deepseekv32"):
        block = "tool_calls" if fmt == "deepseekv4" else "function_calls"
        params = "".join(
            f'<｜DSML｜parameter name="{k}" string="true">{v}</｜DSML｜parameter>\n'
            if isinstance(v, str) else
            f'<｜DSML｜parameter name="{k}" string="false">{json.dumps(v)}</｜DSML｜parameter>\n'
            for k, v in args.items())
        return (f'\n\n<｜DSML｜{block}>\n<｜DSML｜invoke name="{name}">\n{params}'
                f"</｜DSML｜invoke>\n</｜DSML｜{block}>")
    if fmt in ("hermes", "qwen25", "qwen"):
        call = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
        return f"\n<tool_call>\n{call}\n</tool_call>"
    if fmt in ("deepseekv3", "deepseekv31"):
        return ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>" + name + "<｜tool▁sep｜>"
                + json.dumps(args, ensure_ascii=False) + "<｜tool▁call▁end｜><｜tool▁calls▁end｜>")
    if fmt == "mistral":
        return "[TOOL_CALLS]" + json.dumps([{"name": name, "arguments": args}],
                                           ensure_ascii=False)
    if fmt == "qwen3_coder":
        return "\n" + qwen3_coder_call(name, args)
    if fmt in ("glm45", "glm47"):
        return "\n" + glm_call(fmt, name, args)
    if fmt == "minimax_m2":
        return f"\n<minimax:tool_call>\n{minimax_invoke(name, args)}\n</minimax:tool_call>"
    if fmt == "kimi_k2":
        return ("<|tool_calls_section_begin|><|tool_call_begin|>functions." + name + ":0"
                "<|tool_call_argument_begin|>" + json.dumps(args, ensure_ascii=False)
                + "<|tool_call_end|><|tool_calls_section_end|>")
    if fmt == "gpt-oss":  # a commentary message to the tool after the content
        return (f"<|start|>assistant<|channel|>commentary to=functions.{name} "
                "<|constrain|>json<|message|>" + json.dumps(args, ensure_ascii=False)
                + "<|call|>")
    if fmt == "llama3_json":
        return "<|python_tag|>" + json.dumps({"name": name, "parameters": args},
                                             ensure_ascii=False)
    if fmt == "pythonic":
        return "\n[" + name + "(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")]"
    return ""


def now() -> int:
    return int(time.time())
