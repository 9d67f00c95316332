"""One rank of a multi-node SGLang group (``--nnodes`` > 1): what it does on a failure, and
when a non-leader rank is ready. Pure functions.

Relaunching in place is right on one node and wrong in a group: the other ranks stay
blocked on the old torch.distributed/NCCL group, and only a restart of the pod lets the
group controller (LeaderWorkerSet, RBG) recreate the whole group. So with
``policy.group = "exit"`` a failed rank stops its SGLang, records the failure and exits.
"""

from __future__ import annotations

from exporter.attempt.progress import AttemptProgress, Step
from exporter.supervisor.policy import Decision

__all__ = ["group_exit", "worker_ready"]


def group_exit(failure_class: str, planned: Decision) -> Decision:
    """Instead of relaunching in place: stop this rank and exit, so that the group is
    recreated. What the policy planned for this rank is kept in the sentence (a restarted
    daemon reading the same history plans it again)."""
    then = f" (next launch: {planned.reason})" if planned.relaunch else ""
    return Decision(
        relaunch=False,
        profile_index=None,
        delay_s=0.0,
        reason=f"{failure_class}: this rank of a multi-node group stops and exits so that "
        f"the group controller recreates the whole group{then}",
        group_exit=True,
    )


def worker_ready(progress: AttemptProgress, schedulers_alive: int) -> bool:
    """A non-leader rank (node-rank > 0) serves no HTTP of its own (SGLang answers a dummy
    200 on /health there): it is ready once its schedulers finished their startup (the log
    reached the scheduler's ready line) and are alive."""
    return progress.step >= Step.STARTING_HTTP and schedulers_alive > 0
