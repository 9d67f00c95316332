"""Reading SGLang's log: tailing files, parsing lines, assembling tracebacks."""
