"""A stand-in for SGLang's scheduler process, for `sglang_server.py`: SGLang on CPU cannot
load a model here, and everything else of `sglang.launch_server` runs as it is.

It says `ready` through SGLang's pipe as the real scheduler does (`Scheduler.get_init_info`)
and answers each generate request as a scheduler would, through the detokenizer (the
service): one `BatchTokenIDOutput` row of the prompt's first ids, finished by length. So
SGLang's own warmup request goes through the service, and SGLang's TokenizerManager runs
with its own signal handlers, as in a server with a model. It exits on the `ShutdownReq`
of SGLang's SIGTERM path. A request for the text `CRASH` makes it fail as a real one
does (SIGQUIT to the launcher, whose handler then kills the whole tree, itself included).
"""

from __future__ import annotations

import ctypes
import os
import signal
from typing import Any

CRASH = "sglang-tok test: crash the scheduler"
REPLY_IDS = 8


def run_fake_scheduler(server_args: Any, port_args: Any, gpu_id: int, tp_rank: int,
                       pp_rank: int, dp_rank: Any, pipe_writer: Any, *_: Any,
                       **__: Any) -> None:
    import zmq
    from sglang.srt.managers import io_struct

    ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL, 0, 0, 0)  # die with the launcher
    parent = os.getppid()
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.connect(port_args.scheduler_input_ipc_name)  # the TokenizerManager binds it
    push = ctx.socket(zmq.PUSH)
    push.connect(port_args.detokenizer_ipc_name)
    pipe_writer.send({"status": "ready", "max_total_num_tokens": 4096,
                      "max_req_input_len": 4000, "startup_time": None,
                      "hicache_object_layout": None})
    while True:
        msg = io_struct.sock_recv(pull)
        kind = type(msg).__name__
        if kind == "ShutdownReq":
            os._exit(0)
        if kind == "TokenizedGenerateReqInput" and msg.input_text == CRASH:
            os.kill(parent, signal.SIGQUIT)  # what a real scheduler's exception handler does
            os._exit(1)
        if kind == "TokenizedGenerateReqInput":
            push.send(_reply(msg.rid, list(msg.input_ids or [])))


def _reply(rid: str, prompt: list[int]) -> bytes:
    from sglang_tok.protocols.sglang import wire

    ids = (prompt * REPLY_IDS)[:REPLY_IDS] or [0] * REPLY_IDS
    return wire.encode_token_ids({
        "rids": [rid], "http_worker_ipcs": [None],
        "finished_reasons": [{"type": "length", "length": len(ids)}],
        "decoded_texts": [""], "decode_ids": [ids], "read_offsets": [0], "output_ids": [ids],
        "skip_special_tokens": [True], "spaces_between_special_tokens": [True],
        "no_stop_trim": [False], "prompt_tokens": [len(prompt)], "reasoning_tokens": [0],
        "completion_tokens": [len(ids)], "cached_tokens": [0], "retraction_counts": [0],
        "cached_tokens_details": [None], "dp_ranks": [0], "image_tokens": [0],
        "audio_tokens": [0], "video_tokens": [0]})
