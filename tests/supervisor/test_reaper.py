"""The reaper: a subreaper waits for the orphans handed to it, and only for those nobody else
waits for (a launcher's exit status belongs to its Popen, a short command's to its run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from exporter.identity import identify
from exporter.supervisor.processes import spawn, waited_pids
from exporter.supervisor.reaper import Reaper, reapable

REPO = Path(__file__).resolve().parents[2]

# Run in a process of its own: a subreaper inherits every orphan below it, which the test
# runner itself must not.
SCRIPT = r"""
import json, os, signal, subprocess, sys, time
from exporter.supervisor.reaper import Reaper, become_subreaper, is_subreaper

assert not is_subreaper()
assert become_subreaper() and is_subreaper()
# A launcher in its own session (as spawn() starts SGLang), which forks a member of that
# session and dies: the member is orphaned, handed to us, and exits.
launcher = subprocess.Popen(
    [sys.executable, "-c", "import subprocess, sys; "
     "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(0.3)']); "
     "import os; os._exit(0)"],
    start_new_session=True,
)
# Another orphan, of a session that is no attempt's.
stranger = subprocess.Popen(["sh", "-c", "setsid sh -c 'sleep 0.3' & exit 0"])
stranger.wait()
# A short command in our own session: its own wait() must get its status.
short = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(7)"])
# A launcher killed by a signal: its Popen must see -9, not a status stolen by the reaper.
killed = subprocess.Popen(["sleep", "30"], start_new_session=True)
killed.send_signal(signal.SIGKILL)
time.sleep(1.0)
reaper = Reaper(sessions=lambda: {launcher.pid}, claimed=lambda: {launcher.pid, killed.pid})
reaped = reaper.reap()
zombies = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if fields[0] == "Z" and int(fields[1]) == os.getpid():
            zombies.append(int(pid))
print(json.dumps({
    "reaped": sorted((r.origin, r.returncode) for r in reaped),
    "counts": dict(reaper.counts),
    "left": sorted(zombies),
    "claimed": sorted([launcher.pid, killed.pid, short.pid]),
    "launcher": launcher.wait(),
    "killed": killed.wait(),
    "short": short.wait(),
}))
"""


def test_a_subreaper_reaps_orphans_and_leaves_what_others_wait_for():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result = json.loads(done.stdout)
    # The launcher's orphan counts as the attempt's, the setsid one as another's.
    assert result["reaped"] == [["attempt", 0], ["other", 0]]
    assert result["counts"] == {"attempt": 1, "other": 1}
    # Left for their waiters: the two launchers and the short command, nothing else.
    assert result["left"] == result["claimed"]
    assert (result["launcher"], result["killed"], result["short"]) == (0, -9, 7)


def test_reapable_spares_claimed_pids_and_the_daemons_own_session():
    assert reapable(pid=20, session=20, own_session=5, waited_by_others={20}) is False
    assert reapable(pid=21, session=5, own_session=5, waited_by_others=set()) is False
    assert reapable(pid=22, session=20, own_session=5, waited_by_others={20}) is True


def test_a_launcher_that_died_before_the_daemon_recorded_it_is_left_to_its_popen(tmp_path):
    """spawn() registers its Popen before it returns: a launcher that exits at once (a bad
    flag) keeps its exit status for the attempt's classification, reaper or not."""
    popen = spawn(
        [sys.executable, "-c", "import sys; sys.exit(2)"],
        env=dict(os.environ),
        cwd=None,
        log_path=tmp_path / "attempt.log",
    )
    deadline = time.monotonic() + 30
    while identify(popen.pid) is not None and identify(popen.pid).alive():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert popen.pid in waited_pids()
    reaped = Reaper(sessions=set).reap()  # a zombie child of ours, and left alone
    assert popen.pid not in {r.identity.pid for r in reaped}
    assert popen.wait(timeout=30) == 2
    assert popen.pid not in waited_pids()
