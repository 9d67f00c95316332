"""One attempt's state, folded from what its log said: the state machine, how far the
attempt got, the followed log, the snapshot a scrape reads. Pure: no I/O, no clock."""
