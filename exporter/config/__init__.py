"""The daemon's TOML config: parsed with tomllib, validated into frozen dataclasses, every
error naming the file, the line and the key.

schema.py holds the types, load.py reads a file, validate.py checks the parsed document
key by key, positions.py finds where each key sits in the text.
"""

from exporter.config.load import load_config, parse_config
from exporter.config.schema import (
    Config,
    ConfigError,
    MetricsListen,
    Paths,
    Policy,
    Profile,
    SGLangSpec,
    is_group,
    nnodes,
    node_rank,
)

__all__ = [
    "Config",
    "ConfigError",
    "MetricsListen",
    "Paths",
    "Policy",
    "Profile",
    "SGLangSpec",
    "is_group",
    "load_config",
    "nnodes",
    "node_rank",
    "parse_config",
]
