"""SGLang's offline `Engine` on the stand-in (SGLANG_PLUGINS and SGLANG_TOK_STANDIN as set
by the caller): generate, shut down, and say what is left. Run with a python that imports
SGLang; prints one JSON line: each reply (text, output_ids, meta_info), the seconds
`shutdown()` took, and the child processes still running after it.

    python -m sglang_tok_standin.offline_engine MODEL_DIR ASKS_JSON
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

SETTLE_S = 20.0


def run(model: str, asks: list[dict[str, Any]]) -> dict[str, Any]:
    import psutil
    import sglang

    engine = sglang.Engine(model_path=model, device="cpu", log_level="warning",
                           skip_server_warmup=True)
    outs = engine.generate(prompt=[a["text"] for a in asks],
                           sampling_params=[a.get("sampling_params", {}) for a in asks])
    tree = psutil.Process().children(recursive=True)
    t0 = time.monotonic()
    engine.shutdown()
    took = time.monotonic() - t0
    while time.monotonic() - t0 < SETTLE_S and any(_alive(p) for p in tree):
        time.sleep(0.1)
    left = [f"{p.pid} {' '.join(p.cmdline())[:80]}" for p in tree if _alive(p)]
    return {"outs": outs, "shutdown_s": round(took, 2), "left": left}


def _alive(proc: Any) -> bool:
    import psutil

    try:
        return bool(proc.is_running()) and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def main() -> None:
    model, asks = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps(run(model, asks), default=str), flush=True)


if __name__ == "__main__":
    main()
