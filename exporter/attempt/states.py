"""The server's state machine, explicit as in supervisord: every state, and which
transitions are allowed. The daemon's main loop is its only writer."""

from __future__ import annotations

import enum


class ServerState(enum.StrEnum):
    STARTING = "starting"  # launched, not serving yet
    READY = "ready"  # serving and healthy
    UNHEALTHY = "unhealthy"  # alive, but health probes fail
    BACKOFF = "backoff"  # the attempt ended; waiting before the next launch
    STOPPING = "stopping"  # the daemon is stopping the server
    STOPPED = "stopped"  # no server, by request (or not started yet)
    GAVE_UP = "gave_up"  # crash-loop limit reached or no profile left: needs a human


S = ServerState
LIVE = frozenset({S.STARTING, S.READY, S.UNHEALTHY})  # an attempt runs
TRANSITIONS: dict[ServerState, frozenset[ServerState]] = {
    # READY/UNHEALTHY: adopting a running server; BACKOFF/GAVE_UP: resuming after a crash
    S.STOPPED: frozenset({S.STARTING, S.READY, S.UNHEALTHY, S.BACKOFF, S.GAVE_UP}),
    S.STARTING: frozenset({S.READY, S.UNHEALTHY, S.BACKOFF, S.STOPPING, S.GAVE_UP}),
    S.READY: frozenset({S.UNHEALTHY, S.BACKOFF, S.STOPPING, S.GAVE_UP}),
    S.UNHEALTHY: frozenset({S.READY, S.BACKOFF, S.STOPPING, S.GAVE_UP}),
    S.BACKOFF: frozenset({S.STARTING, S.STOPPED, S.GAVE_UP}),
    S.STOPPING: frozenset({S.STOPPED, S.BACKOFF, S.GAVE_UP}),
    S.GAVE_UP: frozenset({S.STOPPED, S.STARTING}),  # STARTING: after a config reload
}


class IllegalTransition(RuntimeError):
    pass


def check_transition(current: ServerState, target: ServerState) -> None:
    if target is not current and target not in TRANSITIONS[current]:
        raise IllegalTransition(f"{current.value} -> {target.value}")
