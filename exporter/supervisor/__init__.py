"""Launching SGLang and keeping track of (and stopping) every process it starts."""
