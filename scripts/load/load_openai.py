#!/usr/bin/env python3
"""Load the example OpenAI server: many concurrent streaming chat completions, each checked.

    python scripts/load/load_openai.py --streams 500                # starts the server itself
    python scripts/load/load_openai.py --url http://127.0.0.1:8000  # or drives a running one

Reports requests/s, time to first content chunk p50/p99 and the inter-chunk gap p99 over
every stream (`sglang_tok/harness/bench/load_openai.py`). Exit 0 when every stream was exact.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from sglang_tok.harness.bench import load_openai

SERVER = Path(__file__).resolve().parents[2] / "examples" / "openai_server.py"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, default=500)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--url", default="", help="a running server; default: start one")
    ap.add_argument("--server", default=str(SERVER),
                    help="the server to start without --url (default: this checkout's "
                         "examples/openai_server.py)")
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--step-ms", type=float, default=25.0)
    ap.add_argument("--json", default="")
    ap.add_argument("--procs", type=int, default=1, help="load processes to spread streams over")
    ap.add_argument("--backend", choices=("aiohttp", "httpx"),
                    default="aiohttp" if importlib.util.find_spec("httpx_aiohttp") else "httpx",
                    help="the openai client's HTTP transport")
    return load_openai.main(ap.parse_args())


if __name__ == "__main__":
    sys.exit(main())
