"""A reload (SIGHUP): the config read again, and what it means for the server: launch again
after giving up, restart a server whose command changed, or nothing. ``decide`` is pure;
the daemon applies what it returns."""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from exporter.attempt.states import LIVE, ServerState
from exporter.config import Config, ConfigError, load_config
from exporter.supervisor.ladder import Ladder

log = logging.getLogger("sglang_sentinel.reload")


class Action(enum.Enum):
    KEEP = "keep"  # no server to replace, or its command is unchanged
    RELAUNCH = "relaunch"  # the daemon gave up: start again from the first profile
    RESTART = "restart"  # the running server's command changed: replace it


@dataclass(frozen=True)
class Reload:
    index: int  # the running attempt's profile within the new ladder (0 with none)
    action: Action


def read(config: Config) -> Config | None:
    """The config read again from its file (the running one when it came from none); None,
    logged, when the file no longer makes a config: the running one stays."""
    source = config.source
    try:
        reloaded = load_config(source) if source else config
    except ConfigError as error:
        log.error("reload: keeping the running config: %s", error)
        return None
    log.info("reload: config re-read from %s", source)
    return reloaded


def decide(state: ServerState, old: Config, ladder: Ladder, running: int | None) -> Reload:
    """What the reloaded ``ladder`` means for a server in ``state`` whose attempt, if any,
    runs profile ``running`` of the ``old`` config (a shorter ladder clamps it)."""
    index = ladder.clamp(running) if running is not None else 0
    if state is ServerState.GAVE_UP:
        return Reload(index, Action.RELAUNCH)
    if state in LIVE and ladder.config.command(index) != old.command(running or 0):
        return Reload(index, Action.RESTART)
    return Reload(index, Action.KEEP)
