"""From one attempt's log to a failure class, its evidence and what to do about it."""
