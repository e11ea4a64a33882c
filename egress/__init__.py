"""sglang-tok's egress process: drain the input ring, validate, route rows and control."""

DISTRIBUTION = "sglang-tok"  # sglang_tok/own_packages.py: another `egress` is refused at start
