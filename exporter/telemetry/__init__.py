"""Sources beside the log: HTTP probes, the attempt's process tree, the GPUs (NVML).

``source.py`` says what a source is and runs the periodic ones; ``registry.py`` lists them.
"""
