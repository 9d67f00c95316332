"""What SGLang is, apart from our machinery: its versions, its command line and where it
listens, the flags its ``--help`` lists, and the roles of its processes. Imports nothing of
ours but the log layer (``detect_version`` reads events)."""
