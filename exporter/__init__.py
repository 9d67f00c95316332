"""sglang-sentinel: supervise an SGLang server, explain its crashes, export it all."""

__version__ = "0.1.0"
