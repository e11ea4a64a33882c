"""sglang-tok's transport: the one socket helper and the egress <-> shard link."""

DISTRIBUTION = "sglang-tok"  # sglang_tok/own_packages.py: another `ring` is refused at start
