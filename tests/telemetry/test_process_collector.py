"""The process collector reads only the identities the daemon hands it: roles from process
titles, memory and CPU, the members that left the tree; a failure to find them is its health."""

from __future__ import annotations

import os
import subprocess
import time

import psutil

from exporter.identity import ProcessIdentity, identify
from exporter.telemetry.processes import ProcessCollector

TITLE = "sglang::scheduler_TP1"


def titled_child() -> subprocess.Popen:
    """A child of this test whose process title is a scheduler's, as SGLang sets it."""
    child = subprocess.Popen(["bash", "-c", f"exec -a {TITLE} sleep 60"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if psutil.Process(child.pid).cmdline()[:1] == [TITLE]:
                return child
        except psutil.Error:
            pass
        time.sleep(0.02)
    child.kill()
    child.wait()
    raise AssertionError("the child never took its title")


def test_the_collector_inspects_the_identities_it_is_handed_and_no_others():
    leader = identify(os.getpid())
    child = titled_child()
    try:
        member = identify(child.pid)
        # The child's pid with another start time: a stranger holding a reused pid.
        stranger = ProcessIdentity(child.pid, member.start_ticks - 100)
        asked = []

        def members():
            asked.append(True)
            return leader, [leader, member, stranger]

        snap = ProcessCollector(members).collect()
    finally:
        child.kill()
        child.wait()
    found = {info.identity: info for info in snap.processes}
    assert asked == [True]
    assert set(found) == {leader, member}
    assert (found[leader].role, found[leader].tp_rank) == ("launcher", "")
    scheduler = found[member]
    assert (scheduler.role, scheduler.tp_rank) == ("scheduler", "1")
    assert not scheduler.zombie and not scheduler.reparented  # its parent is the leader
    assert scheduler.rss_bytes > 0
    assert snap.health.success and snap.health.error is None


def test_between_attempts_there_is_nothing_to_inspect():
    snap = ProcessCollector(lambda: None).collect()
    assert snap.processes == () and snap.health.success


def test_a_failed_scan_is_the_collectors_health_and_keeps_the_last_processes():
    leader = identify(os.getpid())
    answers = [(leader, [leader]), OSError("no /proc")]

    def members():
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    collector = ProcessCollector(members)
    first = collector.collect()
    second = collector.collect()
    assert [info.identity for info in first.processes] == [leader]
    assert second.processes == first.processes
    assert not second.health.success and second.health.error == "no /proc"
    assert second.health.last_success_time == first.health.last_success_time
