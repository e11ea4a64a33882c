"""The example OpenAI server, driven by the official `openai` package and by raw httpx SSE.

The server runs as `python examples/openai_server.py --port PORT` (its own process, with
the real service under it). What the simulated scheduler generated for each completion is
read back from `/debug/requests/{id}`: its ids and their full `tokenizer.decode`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai_server_run import generated, oai, running_server

from sglang_tok.tokenizer import TokenizerInfo, load

MSG = [{"role": "user", "content": "Tell me something in several languages."}]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_server(tmp_path_factory.mktemp("oai"), "--shards", "2", "--step-ms", "10") as url:
        yield url


@pytest.fixture(scope="module")
def info() -> TokenizerInfo:
    return load("deepseek-v4")


def test_models_health_and_bad_requests(base: str) -> None:
    assert oai(base).models.list().data[0].id == "sglang-tok-sim"
    assert httpx.get(f"{base}/health").json()["status"] == "ok"
    r = httpx.post(f"{base}/v1/chat/completions", json={"model": "m", "messages": MSG, "n": 2})
    assert r.status_code == 400 and "n=1" in r.text
    r = httpx.post(f"{base}/v1/completions", content=b"{")
    assert r.status_code == 400 and r.json()["error"]["param"] is None


TOOLS: Any = [{"type": "function", "function": {"name": "search", "parameters": {}}}]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("fields, param, words", [
    ({"tool_parser": "nope", "tools": TOOLS}, "tool_parser",
     "unknown tool_parser 'nope' (from the body); known: deepseekv3"),
    ({"tools": TOOLS}, "tools", "start the server with --tool-call-parser NAME, or pass "
                                "tool_parser in the body"),
    ({"reasoning_parser": "r2"}, "reasoning_parser", "unknown reasoning_parser 'r2'"),
    ({"tool_parser": "hermes", "tools": TOOLS, "tool_stream": "all"}, "tool_stream",
     "unknown tool_stream 'all'"),
    ({"reasoning_parser": "gpt-oss", "tool_parser": "hermes"}, "tool_parser", "gpt-oss pairs"),
    ({"max_tokens": 0}, "max_tokens", "max_tokens must be an integer at least 1, got 0"),
    ({"top_logprobs": 99, "logprobs": True}, "top_logprobs", "between 0 and 20"),
    ({"stop": [1]}, "stop", "stop must be a string or a list"),
    ({"messages": "hi"}, "messages", "messages must be a non-empty list"),
])
def test_a_bad_field_is_a_400_in_openais_shape_before_any_stream(
        base: str, stream: bool, fields: dict[str, Any], param: str, words: str) -> None:
    body = {"model": "m", "messages": MSG, "stream": stream, **fields}
    r = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 400 and r.headers["content-type"] == "application/json", r.text
    err = r.json()["error"]
    assert (err["type"], err["param"], err["code"]) == ("invalid_request_error", param,
                                                       "invalid_value"), err
    assert words in err["message"], err
    with pytest.raises(openai.BadRequestError) as exc:  # what an OpenAI client raises
        oai(base).chat.completions.create(model="m", messages=MSG, stream=stream,
                                          extra_body=fields)
    assert exc.value.param == param and exc.value.code == "invalid_value"


def test_chat_stream_usage_on_every_chunk_and_the_final_usage_chunk(base: str) -> None:
    stream = oai(base).chat.completions.create(
        model="m", messages=MSG, stream=True, max_tokens=80, seed=3,
        stream_options={"include_usage": True, "continuous_usage_stats": True})  # type: ignore[typeddict-unknown-key]
    chunks = list(stream)
    cid = chunks[0].id
    assert all(c.id == cid for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    finals = [k for k, c in enumerate(chunks) if c.choices and c.choices[0].finish_reason]
    assert finals == [len(chunks) - 2]  # the finish chunk, then the usage-only chunk
    assert all(c.usage is not None for c in chunks)
    counts = [c.usage.completion_tokens for c in chunks if c.usage]
    assert counts == sorted(counts) and counts[0] == 0
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    gen = generated(base, cid)
    assert text == gen["text"] and text
    assert chunks[-1].usage.completion_tokens == len(gen["ids"])  # type: ignore[union-attr]
    assert chunks[-2].choices[0].finish_reason == (
        "length" if gen["scheduler_finish"]["type"] == "length" else "stop")


def test_completions_stream_over_raw_sse(base: str) -> None:
    body = {"model": "m", "prompt": "Once upon a time", "max_tokens": 40, "stream": True,
            "seed": 5, "stream_options": {"include_usage": True}}
    events = []
    with httpx.stream("POST", f"{base}/v1/completions", json=body, timeout=60) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line:
                assert line.startswith("data: ")
                events.append(line[6:])
    assert events[-1] == "[DONE]"
    objs = [json.loads(e) for e in events[:-1]]
    assert "usage" not in objs[0]  # include_usage without continuous: only the last chunk
    assert objs[-1]["choices"] == [] and objs[-1]["usage"]["completion_tokens"] == 40
    assert objs[-2]["choices"][0]["finish_reason"] == "length"
    text = "".join(o["choices"][0]["text"] for o in objs if o["choices"])
    assert text == generated(base, objs[0]["id"])["text"]


def test_non_streaming_both_endpoints(base: str) -> None:
    client = oai(base)
    chat = client.chat.completions.create(model="m", messages=MSG, max_tokens=30, seed=9)
    assert chat.choices[0].message.content == generated(base, chat.id)["text"]
    assert chat.usage is not None and chat.usage.completion_tokens == 30
    cmpl = client.completions.create(model="m", prompt="x", max_tokens=1000, seed=9)
    gen = generated(base, cmpl.id)
    assert cmpl.choices[0].text == gen["text"] and cmpl.choices[0].finish_reason == "stop"
    assert gen["scheduler_finish"]["type"] == "stop"  # it ended on its own (EOS)


@pytest.mark.parametrize("stream", [False, True])
def test_stop_strings_are_cut(base: str, stream: bool) -> None:
    client = oai(base)
    full = client.completions.create(model="m", prompt="p", max_tokens=120, seed=21)
    text = full.choices[0].text
    stop = text[len(text) // 2:len(text) // 2 + 3]
    cut = text[:text.find(stop)]
    res = client.completions.create(model="m", prompt="p", max_tokens=120, seed=21,
                                    stop=[stop, "never-appears-here"], stream=stream)
    if stream:
        chunks = list(res)  # type: ignore[arg-type]
        got = "".join(c.choices[0].text for c in chunks)
        reason = chunks[-1].choices[0].finish_reason
    else:
        got, reason = res.choices[0].text, res.choices[0].finish_reason  # type: ignore[union-attr]
    assert got == cut and reason == "stop"


def test_logprob_token_texts_come_from_the_service(base: str, info: TokenizerInfo) -> None:
    client = oai(base)
    want = None
    for stream in (False, True):
        res = client.chat.completions.create(model="m", messages=MSG, max_tokens=24, seed=13,
                                             logprobs=True, top_logprobs=3, stream=stream)
        if stream:
            chunks = list(res)  # type: ignore[arg-type]
            cid = chunks[0].id
            content = [t for c in chunks if c.choices and c.choices[0].logprobs
                       for t in c.choices[0].logprobs.content or []]
        else:
            cid = res.id  # type: ignore[union-attr]
            content = res.choices[0].logprobs.content  # type: ignore[union-attr]
        ids = generated(base, cid)["ids"]
        assert [t.token for t in content] == [info.token_texts.get(i, "") for i in ids]
        assert all(len(t.top_logprobs) == 3 and t.top_logprobs[0].token == t.token
                   for t in content)
        assert all(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob for t in content)
        want = want or [t.token for t in content]
        assert [t.token for t in content] == want  # the same seed: the same tokens


def test_a_client_that_disconnects_is_aborted_and_the_others_are_not(base: str) -> None:
    async def one(client: httpx.AsyncClient, leave_after: int) -> tuple[str, str, bool]:
        body = {"model": "m", "messages": MSG, "max_tokens": 150, "stream": True}
        text, cid, n = "", "", 0
        async with client.stream("POST", f"{base}/v1/chat/completions", json=body) as r:
            async for line in r.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                obj = json.loads(line[6:])
                cid = obj["id"]
                if obj["choices"]:
                    text += obj["choices"][0]["delta"].get("content") or ""
                n += 1
                if leave_after and n >= leave_after:
                    return cid, text, False  # closes the response: the client goes away
        return cid, text, True

    async def main() -> list[tuple[str, str, bool]]:
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(one(client, 4), *(one(client, 0) for _ in range(5)))

    results = asyncio.run(main())
    left = results[0][0]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        rec = generated(base, left)
        if rec["finish"] is not None:
            break
        time.sleep(0.2)
    assert rec["state"] == "aborted" and rec["finish"] == {"type": "abort"}, rec
    for cid, text, completed in results[1:]:
        assert completed and text == generated(base, cid)["text"]
        assert generated(base, cid)["state"] == "finished"


def test_200_concurrent_streams_are_each_exact(base: str) -> None:
    async def one(client: openai.AsyncOpenAI, k: int) -> tuple[str, str]:
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"request {k}"}], stream=True,
            max_tokens=48)
        cid, text = "", ""
        async for c in stream:
            cid = c.id
            if c.choices:
                text += c.choices[0].delta.content or ""
        return cid, text

    async def main() -> list[tuple[str, str]]:
        http = httpx.AsyncClient(limits=httpx.Limits(max_connections=256), timeout=120)
        client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0,
                                    http_client=http)
        try:
            return await asyncio.gather(*(one(client, k) for k in range(200)))
        finally:
            await client.close()

    results = asyncio.run(asyncio.wait_for(main(), 240))
    assert len({cid for cid, _ in results}) == 200
    with httpx.Client(timeout=10) as h:
        for cid, text in results:
            assert text == h.get(f"{base}/debug/requests/{cid}").json()["text"], cid
