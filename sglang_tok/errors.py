"""A refused setting: every process's entry point turns one into a line and exit code 2
(`process.run_titled`), and the CLI does before anything starts (`config.finalize`)."""


class ConfigError(ValueError):
    pass
