"""sglang-tok's decoder shards: each the sole owner of its requests' state."""

DISTRIBUTION = "sglang-tok"  # sglang_tok/own_packages.py: another `shards` is refused at start
