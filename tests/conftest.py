import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(scope="module")
def plain_decoders_once() -> Iterator[None]:
    """Every RidTable of a module shares its tokenizer's array decoder, built once: its
    tables are read-only once made (a request's state lives in the table's Slots), and a
    property test makes fresh tables for every example."""
    from sglang_tok.shards import table

    real = table.plain_decoder
    made: dict[tuple[int, int], Any] = {}

    def once(info: Any, min_rows: int) -> Any:
        key = (id(info), min_rows)
        if key not in made:
            made[key] = (info, real(info, min_rows))  # holding info keeps its id unique
        return made[key][1]

    table.plain_decoder = once
    try:
        yield
    finally:
        table.plain_decoder = real
