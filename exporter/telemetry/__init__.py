"""Sources beside the log: HTTP probes (and, later, GPUs and the process tree)."""
