"""sglang-tok as SGLang's detokenizer: its message layout (`wire`), the replies a shard
sends (`reply`), and the plugin that launches the service in SGLang's place (`plugin`).

Nothing here imports SGLang except `plugin`'s functions, and only once SGLang calls them.
"""
