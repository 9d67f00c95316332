"""The subcommands of the ``sglang-sentinel`` command line, one module each."""
