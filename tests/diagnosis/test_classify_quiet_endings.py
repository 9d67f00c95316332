"""Endings no Python exception explains: what killed or stopped the server is said by
something else (a supervisor, the kernel, a batch system, native code), or nothing failed."""

from __future__ import annotations

import pytest

from exporter.diagnosis.classify import classify
from exporter.diagnosis.taxonomy import FailureClass as C
from exporter.logs.reader import read_log


def run(text: str):
    return classify(*read_log(text))


SERVING = (
    "[2026-07-21 22:14:06] Decode batch, #running-req: 21, #token: 31007, token usage: 0.15, "
    "cuda graph: True, gen throughput (token/s): 1189.02, #queue-req: 0\n"
)


@pytest.mark.parametrize(
    "ending",
    [
        "[run_sglang.sh 2026-07-21T22:14:09+00:00] server exited with code 139",
        "[2026-06-03, 05:03:44 UTC] {local_task_job_runner.py:266} INFO - Task exited with return"
        " code Negsignal.SIGKILL",
        "Apr 09 11:52:41 gpu-07 systemd[1]: sglang.service: Main process exited, code=dumped, "
        "status=11/SEGV",
        "TERM_MEMLIMIT: job killed after reaching LSF memory usage limit.",
        "TERM_RUNLIMIT: job killed after reaching LSF run time limit.",
        "ERROR: Job failed: execution took longer than 1h0m0s seconds",
        "  message: Pod was terminated in response to imminent node shutdown.",
        '            "reason": "OutOfMemoryError: Container killed due to memory usage"',
        "Too long with no output (exceeded 10m0s): context deadline exceeded",
        "2026-07-08T02:19:03.2279155Z ##[error]The runner has received a shutdown signal. This"
        " can happen when the runner service is stopped",
        '2026-02-11T09:14:52Z  Terminated  Exit Code: 137, Exit Message: "OOM Killed"',
        "timeout: sending signal KILL to command \u2018python3\u2019",
        "Cancelling nested steps due to timeout",
        "I 02-19 03:06:51 recovery_strategy.py:201] The cluster is preempted or failed.",
        "2026-05-27T22:56:31Z Instance stopped: outbid by a higher-priority rental",
        "2025-05-27T22:56:31Z pod stopped: insufficient balance",
        "2026-04-17T15:30:41: PM2 log: [PM2][WORKER] Process 0 restarted because it exceeds "
        "--max-memory-restart value (current_memory=25769803776 max_memory_limit=24696061952)",
        "memmon: restarting sglang, RSS 25769803776 > limit 24696061952",
        "Sep 02 04:00:12 llm-prod-3 systemd[1]: sglang.service: Service reached runtime time "
        "limit. Stopping.",
        "\u2514\u2500\u2500\u2500\u2716 serve-and-score  serve-score  eval-7hx2c-serve-2213  30m"
        "  Step exceeded its deadline",
        "/opt/llm/run_sglang.sh: line 17:  1190 File size limit exceeded(core dumped) python3 -m "
        "sglang.launch_server",
        "CPU time limit exceeded (core dumped)",
        "[2026-07-21 22:44:09,131: ERROR/MainProcess] Hard time limit (1800s) exceeded for "
        "tasks.summarize_batch[3f4c1ad2-9a7e-4c11-8f0a-2f3b1e9c7d61]",
        "Memory limit exceeded (62Gi)",
        '    "statusReason": "Job attempt duration exceeded timeout",',
        "9921031.0   mpatel   11/20 08:57 Error from slot1_4@gpu2013: Job has gone over cgroup "
        "memory limit of 61440 megabytes.",
        "metaflow.plugins.timeout_decorator.TimeoutException: Step timed out after 2 hours, 0 "
        "minutes, 0 seconds",
        "Your session crashed after using all available RAM.",
        "zsh: killed     python -m sglang.launch_server --model-path /data/ckpt --tp 2",
        '\\_ llm_sglang.1  lmsysorg/sglang:v0.5.9  Shutdown 9 minutes ago  "task: non-zero exit '
        '(137): dockerexec: unhealthy container"',
        "2026-02-11T03:58:03.5021190Z ##[error]The job running on agent gpu-agent-02 ran longer "
        "than the maximum time of 60 minutes. For more information, see https://go.microsoft.com",
        "Canceling since a higher priority waiting request for 'bench-main' exists",
        "failed       37  : qmaster enforced h_rt, h_cpu, or h_vmem limit",
        "17:51:02 system | sending SIGTERM to all processes",
        "Pane is dead (signal 9, Tue Feb 24 11:20:13 2026)",
        "srun: error: gpu-a17: task 0: User defined signal 1",
        "Jan 28 04:17:24 dgx-b kernel: Kernel panic - not syncing: softlockup: hung tasks",
        "Oct 03 10:16:32 inf-07 systemd[1]: sglang-qwen.service: start operation timed out. "
        "Terminating.",
        "Jan 30 23:02:41 box systemd[1]: session-14.scope: Killing process 190311 (python) with "
        "signal SIGHUP.",
        "  Warning  Preempted  4m    kueue-admission  Preempted to accommodate a workload (UID: "
        "5c0e9a7d-3b41-4f0e-9d2a-71b8f0c2d6e4) due to prioritization in the ClusterQueue",
        "salloc: Job allocation 88213 has been revoked.",
        "Apr 02 00:00:01 llm-prod-2 systemd[1]: sglang.service: Main process exited, code=killed, "
        "status=1/HUP",
        "./run_gen.sh: line 4: 1187342 Alarm clock             python gen_synth.py --n 400000",
        "Process exceeded running time limit (2h)",
        "Error: timeout: container 5e0a1c4d2b8f exceeded 3600 second timeout, killing",
        "Error: The operation was canceled.",
        "Mar 05 10:15:03 gpu-srv-3 systemd[1]: sglang.service: Control process exited, "
        "code=exited, status=7/NOTRUNNING",
        "  Warning  Preempted   12m   runai-sch   Job was preempted by higher priority workload "
        "team-vision/train-vit-h, over-quota resources reclaimed",
        "2m49s  Warning  FailedPostStartHook  pod/llama-sgl-0   PostStartHook failed",
        "884213       sgl-serve   NODE_FAIL      0:0   05:41:27          gpu-a17",
        "2025-11-12 02:01:58,312 WARNING Found /var/run/reboot-required, rebooting",
        'Apr 02 16:10:33 gpu-prod-4 dockerd[1290]: time="2026-04-02T16:10:33.207114882Z" '
        'level=info msg="Container failed to exit within 10s of signal 15 - using the force" '
        "container=3e9d1a77c0b2",
        "[server exited on signal 1]",
        '  Warning  Evicted    71s    kubelet            Usage of EmptyDir volume "dshm" exceeds '
        'the limit "2Gi".',
        "Jul 03 02:13:49 lab-srv2 kernel: thermal thermal_zone1: critical temperature reached, "
        "shutting down",
        "timed out waiting for input: auto-logout",
        "(sgl) bench@a100-07:~$ timed out waiting for input: auto-logout",
        # Cloud Run's memory limit; Jenkins' build-timeout plugin; bash's report of its child
        "2026-03-09 19:22:41.803 CET  Memory limit of 32768 MiB exceeded with 33109 MiB used. "
        "Consider increasing the memory limit",
        "Build timed out (after 45 minutes). Marking the build as aborted.",
        "./serve.sh: line 22: 30117 Segmentation fault      (core dumped) python -m "
        'sglang.launch_server --model-path "$MODEL"',
        # a wrapper's subprocess.run(timeout=) on the server: the flags it quotes reject nothing
        "subprocess.TimeoutExpired: Command '['python', '-m', 'sglang.launch_server', "
        "'--model-path', '/mnt/ckpt', '--tp', '8']' timed out after 1800 seconds",
    ],
)
def test_a_supervisor_or_a_batch_system_saying_it_killed_the_server_is_the_root(ending):
    result = run(SERVING + ending + "\n")
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, ending.strip())


@pytest.mark.parametrize(
    "step_failed",
    ["Error: Process completed with exit code 1.", "Error: The command exited with status 1"],
)
def test_a_ci_runners_word_that_the_step_failed_is_never_the_cause(step_failed):
    killed = (
        "/home/runner/work/_temp/5b8e01f2.sh: line 1:  2318 Killed                  python -m "
        "sglang.launch_server --model-path ./ckpt --port 30000"
    )
    waited = (
        "Traceback (most recent call last):\n"
        '  File "/home/runner/work/evals/scripts/wait_for_server.py", line 31, in <module>\n'
        '    raise SystemExit("server process is gone")\n'
        "SystemExit: server process is gone\n"
    )
    result = run(SERVING + killed + "\n" + waited + step_failed + "\n")
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, killed)
    # alone, it still says the job failed: a failure, its line the root
    alone = run(SERVING + step_failed + "\n")
    assert (alone.failure_class, alone.root_cause_line) == (C.OTHER, step_failed)


def test_systemd_failing_a_unit_is_a_failure_and_its_missing_program_the_cause():
    unit = (
        "Nov 18 08:02:11 llm-box systemd[1]: Started sglang.service - SGLang.\n"
        "Nov 18 08:02:11 llm-box {spawn}\n"
        "Nov 18 08:02:11 llm-box systemd[1]: sglang.service: Main process exited, {how}\n"
        "Nov 18 08:02:11 llm-box systemd[1]: sglang.service: Failed with result '{result}'.\n"
    )
    missing = (
        "(python)[3120]: sglang.service: Failed at step EXEC spawning /opt/sglang/.venv/bin/"
        "python: No such file or directory"
    )
    result = run(unit.format(spawn=missing, how="code=exited, status=203/EXEC", result="exit-code"))
    assert result.failure_class is C.DEPENDENCY_ERROR
    assert result.root_cause_line == f"Nov 18 08:02:11 llm-box {missing}"
    exited = unit.format(
        spawn="sglang[3120]: Loading...", how="code=exited, status=1/FAILURE", result="exit-code"
    )
    assert run(exited).failure_class is C.OTHER  # no word of why, but no healthy log either
    # 'signal': what a stop the server did not exit 0 from reads too
    stopped = unit.format(
        spawn="sglang[3120]: Loading...", how="code=killed, status=15/TERM", result="signal"
    )
    assert run(stopped).failure_class is C.NONE


@pytest.mark.parametrize(
    "hangup",
    [
        "client_loop: send disconnect: Broken pipe",
        "packet_write_wait: Connection to 10.8.0.4 port 22: Broken pipe",
        "Connection to gpu-lab-3 closed by remote host.",
        "Aug 19 23:43:41 dgx-a sshd[19021]: Timeout, client not responding from user mlee "
        "10.9.0.77 port 51644",
    ],
)
def test_the_ssh_session_a_foreground_server_ran_in_dropping_killed_it(hangup):
    result = run(SERVING + hangup + "\nrc=7\n")
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, hangup)
    # nohup or tmux kept it: it served on after the session dropped
    later = SERVING.replace("22:14:06", "22:54:06")
    assert run(SERVING + hangup + "\n" + later).failure_class is C.NONE
    # the log's tail read the next morning repeats its last lines: nothing served after
    tail = SERVING + hangup + "\n\nbench@a100-07:~$ tail -n 1 ~/sgl.log\n" + SERVING
    assert run(tail).failure_class is C.KILLED_BY_SIGNAL


def test_the_container_runtimes_events_say_the_kill_or_the_freeze():
    event = (
        "2026-02-17T14:02:{s}.118274331Z container {action} 5c1e7d0a9b44 (image=lmsysorg/sglang:"
        "v0.5.9-cu129, name=sglang{extra})"
    )
    term = event.format(s="39", action="kill", extra=", signal=15")
    kill = event.format(s="49", action="kill", extra=", signal=9")
    die = event.format(s="49", action="die", extra=", exitCode=137")
    result = run(f"{SERVING}$ docker events\n{term}\n{kill}\n{die}\n")
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, kill)
    assert run(f"{SERVING}{die}\n").failure_class is C.KILLED_BY_SIGNAL  # its exit, 128 + 9
    assert run(f"{SERVING}{term}\n").failure_class is not C.KILLED_BY_SIGNAL  # a stop asked
    pause = event.format(s="49", action="pause", extra="")
    result = run(f"{SERVING}$ docker events\n{pause}\n")
    assert (result.failure_class, result.root_cause_line) == (C.HANG_TIMEOUT, pause)
    # unpaused, it served on
    later = SERVING.replace("22:14:06", "22:54:06")
    assert run(f"{SERVING}{pause}\n{later}").failure_class is C.NONE


def test_a_server_the_shell_suspended_hangs_and_the_port_it_holds_is_taken():
    stopped = (
        "[1]+  Stopped                 python -m sglang.launch_server --model-path /data/gemma "
        "--port 30000"
    )
    result = run(f"{SERVING}^Z\n{stopped}\nlab@dev-4090:~$ ls /data\n")
    assert (result.failure_class, result.root_cause_line) == (C.HANG_TIMEOUT, stopped)
    taken = (
        "[2025-05-06 18:22:47] ERROR:    [Errno 98] error while attempting to bind on address "
        "('0.0.0.0', 30000): address already in use"
    )
    relaunched = run(f"{SERVING}^Z\n{stopped}\n$ python -m sglang.launch_server\n{taken}\n")
    assert relaunched.failure_class is C.PORT_IN_USE


def test_a_batch_job_that_cancels_itself_when_its_client_is_done_did_not_fail():
    cancelled = (
        "slurmstepd: error: *** JOB 9120447 ON gpu-a100-031 CANCELLED AT 2026-06-02T13:58:52 ***"
    )
    assert run(f"{SERVING}+ scancel 9120447\n{cancelled}\n").failure_class is C.NONE
    # nobody here asked for it (an admin's scancel), or Slurm's own reason: a kill
    assert run(f"{SERVING}{cancelled}\n").failure_class is C.KILLED_BY_SIGNAL
    limit = cancelled.replace(" ***", " DUE TO TIME LIMIT ***")
    assert run(f"{SERVING}+ scancel 9120447\n{limit}\n").failure_class is C.KILLED_BY_SIGNAL


@pytest.mark.parametrize(
    "event",
    [
        "Warning  FailedCreatePodSandBox  2m (x71 over 17m)   kubelet  Failed to create pod "
        'sandbox: rpc error: code = Unknown desc = no runtime for "nvidia" is configured',
        "Warning  FailedMount  4m (x14 over 31m)  kubelet  MountVolume.SetUp failed for volume "
        '"models" : mount.nfs: Connection timed out',
        "qwen-0   0/1     ImagePullBackOff   0          6m",
        "Warning  FailedAttachVolume  27m  attachdetach-controller  Multi-Attach error for volume "
        '"pvc-6a1f0e2c" Volume is already used by pod(s) sgl-mixtral-84f6d9c7b5-zz9k1',
        'Warning  Failed     20m (x12 over 22m)   kubelet            Error: secret "hf-token" not '
        "found",
    ],
)
def test_a_pod_whose_container_never_started_failed_before_the_server(event):
    result = run(f"$ kubectl describe pod qwen-0\n{event}\n")
    assert (result.failure_class, result.root_cause_line) == (C.OTHER, event)


def test_a_container_whose_command_the_image_lacks_never_started_for_a_dependency():
    refused = (
        "Message:    failed to create containerd task: failed to create shim task: OCI runtime "
        "create failed: runc create failed: unable to start container process: error during "
        'container init: exec: "python": executable file not found in $PATH: unknown'
    )
    result = run(f"    Last State:   Terminated\n      Reason:     StartError\n      {refused}\n")
    assert (result.failure_class, result.root_cause_line) == (C.DEPENDENCY_ERROR, refused)


def test_an_image_the_kubelet_cannot_pull_is_rooted_where_it_says_why():
    why = (
        'Warning  Failed     12s (x3 over 58s)  kubelet            Failed to pull image "lmsysorg/'
        'sglang:v0.5.9-cu12.9": rpc error: code = NotFound desc = failed to pull and unpack image'
    )
    code = "Warning  Failed     12s (x3 over 58s)  kubelet            Error: ErrImagePull"
    result = run(f"$ kubectl describe pod qwen-0\n{why}\n{code}\n")
    assert (result.failure_class, result.root_cause_line) == (C.OTHER, why)


def test_a_drain_that_finished_is_a_clean_stop_though_no_batch_is_in_the_paste():
    log = (
        '[2026-11-19 16:20:02] INFO:     10.42.0.9:40122 - "POST /v1/completions HTTP/1.1" 400 '
        "Bad Request\n"
        "[2026-11-19 16:23:01] SIGTERM received. signum=15 frame=None. Draining requests and "
        "shutting down...\n"
        "[2026-11-19 16:23:04] Gracefully exiting... Remaining number of requests 0. Remaining "
        "requests remaining_rids=[].\n"
    )
    assert run(log).failure_class is C.NONE
    # the drain not done when the paste ends: no word that it stopped cleanly
    unfinished = log.replace("Remaining number of requests 0.", "Remaining number of requests 3.")
    assert run(unfinished).failure_class is not C.NONE


@pytest.mark.parametrize(
    ("line", "failure_class"),
    [
        ("Apr 25 02:00:01 node7 systemd[1]: sglang.service: Unit now frozen.", C.HANG_TIMEOUT),
        ("/usr/bin/python: No module named sglang", C.DEPENDENCY_ERROR),
        (
            "docker: Error response from daemon: failed to create task for container: "
            "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.9, please "
            "update your driver to a newer version, or use an earlier cuda container: unknown.",
            C.CUDA_ERROR,
        ),
        (
            "nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown",
            C.OTHER,
        ),
        (
            "Jun 02 04:11:20 gpu-edge-3 nvidia-smi[1044]: NVIDIA-SMI has failed because it "
            "couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver "
            "is installed and running.",
            C.OTHER,
        ),
    ],
)
def test_what_the_host_says_before_the_server_could_start_or_answer(line, failure_class):
    result = run(f"$ ./start.sh\n{line}\n")
    assert (result.failure_class, result.root_cause_line) == (failure_class, line)


def test_a_pod_that_waited_for_a_node_and_then_served_did_not_fail():
    waited = (
        "12m   Warning  FailedScheduling   pod/qwen8b-6d4b9c7f5-r8x2m   0/6 nodes are available: "
        "6 Insufficient nvidia.com/gpu.\n"
    )
    assert run(waited).failure_class is C.OTHER  # the server never ran
    assert run(waited + SERVING).failure_class is C.NONE


def test_an_exit_status_that_is_no_fatal_signal_is_no_kill():
    assert run(SERVING + "server exited with code 1\n").failure_class is not C.KILLED_BY_SIGNAL
    assert run(SERVING + "server exited with code 130\n").failure_class is not C.KILLED_BY_SIGNAL
    pane = "Pane is dead (status 1, Tue Feb 24 11:20:13 2026)"
    srun = "srun: error: gpu-a17: task 0: Exited with exit code 1"
    for ended in (pane, srun, "[server exited on signal 15]"):
        assert run(SERVING + ended + "\n").failure_class is not C.KILLED_BY_SIGNAL


def test_the_kernels_segfault_report_is_the_root_of_the_core_dump_systemd_reports():
    segfault = (
        "Apr 09 11:52:37 gpu-07 kernel: python3[118402]: segfault at 18 ip 00007f3c2a4b9e21 sp "
        "00007ffd6b1e0a90 error 4 in loop.cpython-310-x86_64-linux-gnu.so"
    )
    dumped = (
        "Apr 09 11:52:41 gpu-07 systemd[1]: sglang.service: Main process exited, code=dumped, "
        "status=11/SEGV"
    )
    result = run(f"{segfault}\n{dumped}\n")
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, segfault)


def test_another_programs_segfault_on_the_host_is_not_the_servers():
    other = (
        "Aug 19 09:15:02 a10-box kernel: dcgm-exporter[30118]: segfault at 0 ip 00007f6b2a1c34b0"
        " sp 00007f6b1dffa2e8 error 4 in libdcgm.so"
    )
    assert run(SERVING + other + "\n").failure_class is C.NONE
    ours = other.replace("dcgm-exporter[30118]", "sglang::schedul[30118]")
    assert run(SERVING + ours + "\n").failure_class is C.KILLED_BY_SIGNAL


def test_the_status_sglang_prints_for_its_dead_scheduler_says_the_kill():
    dead = (
        "[2026-04-29 09:03:57] Rank 1 scheduler is dead. Please check if there are relevant logs."
    )
    status = "[2026-04-29 09:03:58] Exit code: -9"
    result = run(f"{dead}\n{status}\n")
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, status)


def test_glibc_finding_its_heap_corrupted_is_the_crash_above_the_abort():
    corrupt = "double free or corruption (!prev)"
    result = run(SERVING + corrupt + "\n" + ABORT)
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, corrupt)


@pytest.mark.parametrize(
    "fatal",
    [
        "c++: fatal error: Killed signal terminated program cc1plus",
        "nvcc error   : 'cicc' died due to signal 9 (Kill signal)",
        "ptxas error   : Entry function '_ZN10flashinfer3mla27BatchMLAPagedAttentionKernel' uses "
        "too much shared data (0x1c400 bytes, 0x18c00 max)",
    ],
)
def test_a_compilers_own_fatal_error_is_the_root_of_the_jit_build_that_stopped(fatal):
    log = (
        "[1/3] c++ -MMD -MF moe_align.o.d -c /x/moe_align.cpp -o moe_align.o\n"
        f"{fatal}\ncompilation terminated.\nninja: build stopped: subcommand failed.\n"
    )
    result = run(log)
    assert (result.failure_class, result.root_cause_line) == (C.KERNEL_ERROR, fatal)


def test_systemds_watchdog_on_a_unit_sglang_never_pings_killed_it_no_hang():
    host = "Mar 14 02:13:01 inf-a100-03 systemd[1]: sglang-qwen.service:"
    watchdog = f"{host} Watchdog timeout (limit 5min)!"
    log = (
        f"{watchdog}\n{host} Killing process 41877 (python) with signal SIGABRT.\n"
        f"{host} Main process exited, code=dumped, status=6/ABRT\n"
        f"{host} Killing process 42011 (python) with signal SIGKILL.\n"
    )
    result = run(log)
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, watchdog)


@pytest.mark.parametrize(
    "stall",
    [
        "[Thu Sep 10 03:12:44 2026] nfs: server homefs01 not responding, still trying",
        "[Thu Sep 10 03:15:48 2026] INFO: task sglang::schedul:2841187 blocked for more than 122"
        " seconds.",
    ],
)
def test_a_process_stuck_in_the_kernel_on_io_hangs(stall):
    load = "[2026-09-10 03:10:02] Load weight begin. avail mem=78.68 GB\n"
    result = run(f"{load}$ sudo dmesg -T | tail -n 2\n{stall}\n")
    assert (result.failure_class, result.root_cause_line) == (C.HANG_TIMEOUT, stall)


ABORT = "Fatal Python error: Aborted\n"


def test_a_cpp_exceptions_message_above_the_abort_says_what_crashed():
    terminate = "terminate called after throwing an instance of 'std::runtime_error'\n"
    cubin = (
        "  what():  [flashinfer] trtllm-gen FMHA: failed to load cubin for sm_103 "
        "(CUDA_ERROR_NO_BINARY_FOR_GPU), kernel fmhaSm100aKernel"
    )
    result = run(terminate + cubin + "\n" + ABORT)
    assert (result.failure_class, result.root_cause_line) == (C.KERNEL_ERROR, cubin.strip())
    # words no family knows: the crash it ends in, rooted at its own words
    again = "  what():  Resource temporarily unavailable"
    result = run(terminate + again + "\n" + ABORT)
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, again.strip())


def test_llvm_aborting_inside_a_kernels_compiler_is_a_kernel_error():
    llvm = "LLVM ERROR: Failed to compute parent layout for slice layout."
    result = run(f"{llvm}\n{ABORT}")
    assert (result.failure_class, result.root_cause_line) == (C.KERNEL_ERROR, llvm)


def test_an_oom_computing_the_logits_of_a_cut_traceback_is_a_runtime_oom():
    log = (
        '  File "/x/sglang/srt/layers/logits_processor.py", line 881, in _compute_lm_head\n'
        "    logits = torch.matmul(\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.52 GiB. GPU 1 has a "
        "total capacity of 79.19 GiB of which 2.11 GiB is free. Of the allocated memory 71.40 "
        "GiB is allocated by PyTorch\n"
    )
    assert run(log).failure_class is C.RUNTIME_OOM


def test_an_exception_python_reports_as_ignored_at_exit_is_no_failure():
    log = (
        SERVING + "5000/5000 done, wrote out_5k.jsonl\n"
        "Exception ignored in: <function _ConnectionBase.__del__ at 0x7f2c5b2e8ca0>\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/lib/python3.10/multiprocessing/connection.py", line 132, in __del__\n'
        "    self._close()\n"
        "OSError: [Errno 9] Bad file descriptor\n"
    )
    assert run(log).failure_class is C.NONE
    # the same traceback raised: a failure
    raised = log.replace(log.splitlines()[2] + "\n", "")
    assert run(raised).failure_class is C.OTHER


KILL = (
    "[Fri Jul 17 15:48:22 2026] Out of memory: Killed process 77120 (python) total-vm:121443880kB,"
    " anon-rss:97212004kB"
)


def test_a_kernel_oom_kill_the_server_served_on_after_killed_another_program():
    after = SERVING.replace("2026-07-21 22:14:06", "2026-07-17 15:48:28")
    before = SERVING.replace("2026-07-21 22:14:06", "2026-07-17 15:48:19")
    assert run(f"$ sudo dmesg -T\n{KILL}\n\nserver log:\n{before}{after}").failure_class is C.NONE
    # ... the server's last words before the kill, nothing after it: the server's
    result = run(f"{before}$ sudo dmesg -T\n{KILL}\n")
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, KILL)
    # ... served again only once relaunched: the kill was the server's
    relaunch = "[2026-07-17 15:48:25] server_args=ServerArgs(model_path='/m')\n"
    result = run(f"$ sudo dmesg -T\n{KILL}\n\nserver log:\n{before}{relaunch}{after}")
    assert result.failure_class is C.KILLED_BY_SIGNAL
    # ... one of SGLang's own processes killed: the scheduler prints on, the requests wait
    own = KILL.replace("(python)", "(sglang::detoken)")
    result = run(f"$ sudo dmesg -T\n{own}\n\nserver log:\n{before}{after}")
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, own)


def test_an_eviction_is_the_root_though_the_previous_containers_log_pasted_below_served():
    evicted = (
        "  Warning  Evicted    14m   kubelet            The node was low on resource: memory. "
        "Threshold quantity: 500Mi"
    )
    log = (
        "      Exit Code:    137\n"
        f"Events:\n{evicted}\n\n$ kubectl -n docai logs qwen-0 --previous | tail -n 2\n{SERVING}"
    )
    result = run(log)
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, evicted.strip())


LAST_BATCH = SERVING.strip()


@pytest.mark.parametrize(
    "after",
    [
        # a health checker's own failed checks
        "[UTC Jun 23 01:46:33] error    : 'sglang' failed protocol test [HTTP] at "
        "[127.0.0.1]:30000/health_generate [TCP/IP] -- HTTP: Error receiving data",
        "httpok: GET http://127.0.0.1:30000/health_generate timed out after 10 seconds",
        '  "Output": "Health check exceeded timeout (10s)"',
        # a balancer's verdict, the operator's own words
        "process is alive, nothing in the log for 20 minutes, HAProxy took it out of the pool.",
        "(after that nothing for 40 minutes, the client side times out)",
    ],
)
def test_a_server_gone_silent_while_serving_and_found_not_answering_hung_at_its_last_line(
    after,
):
    result = run(f"{SERVING}{SERVING}\n{after}\n")
    assert (result.failure_class, result.root_cause_line) == (C.HANG_TIMEOUT, LAST_BATCH)
    assert result.signature == "went_silent" and result.confidence.value == "low"


@pytest.mark.parametrize(
    "above, below",
    [
        ("", ""),  # a paste that ends while serving: cut there
        ("is it hung? the last decode line is an hour old but /health answers", ""),
        # a probe refused while the server was still starting, in the events above its log
        (
            "  Warning  Unhealthy  5m  kubelet  Readiness probe failed: Get "
            '"http://10.0.0.4:30000/health": dial tcp 10.0.0.4:30000: connect: connection refused',
            "",
        ),
        ("", "our gateway has a 30s client timeout for long generations"),  # a setting
    ],
)
def test_a_serving_log_with_no_sign_it_stopped_answering_is_healthy(above, below):
    assert run(f"{above}\n{SERVING}{SERVING}\n{below}\n").failure_class is C.NONE


@pytest.mark.parametrize(
    "stop",
    [
        "2026-09-09 17:50:00  Workspace stopped automatically: autostop after 4h of inactivity.",
        "Your notebook tried to run longer than the maximum allowed session time of 12 hours and"
        " was stopped.",
        # who stopped it is the record's program: a spot watcher, an idle-GPU reaper
        "Apr 08 13:41:58 gpu-2 spot-watch[1044]: stopping sglang.service and acknowledging",
        "Aug 14 03:00:02 gpu07 gpu-reaper[118230]: killing PID 48211 (python3) on GPU 0, sending"
        " SIGKILL",
        'time="2026-07-15T03:00:02Z" level=info msg="Draining node gpu-a10g-2" node=gpu-a10g-2',
        # Ray's autoscaler, the plural of what it stopped
        "2026-05-06 21:40:02,713\tINFO autoscaler.py:1188 -- Terminating 1 nodes of type "
        "gpu_a100_worker (idle for 5.0 min, max_workers 4)",
    ],
)
def test_a_platform_stopping_the_server_on_its_own_account_killed_it_from_outside(stop):
    result = run(f"{SERVING}{SERVING}\n{stop}\n")
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, stop.strip())
    assert result.signature == "stopped_on_its_own_account"


SIGTERM = (
    "[2026-07-21 22:14:09] SIGTERM received. signum=15 frame=None. Draining requests and shutting"
    " down...\n"
)


@pytest.mark.parametrize(
    "log",
    [
        # an operator's own stop gives no reason of a platform's
        f"{SERVING}Apr 08 13:41:58 gpu-2 systemd[1]: Stopping sglang.service - SGLang...\n",
        # drained on the SIGTERM a node drain sent: stopped cleanly
        f"{SERVING}evicting pod llm/qwen-sglang-5d8f7c9b6-kx7tq\n{SIGTERM}",
        # the platform's stop before the server served: a startup it gave up on, not a kill
        "[2026-07-21 22:10:00] Capture cuda graph begin. This can take up to several minutes.\n"
        "[ecs-agent] Task stopped: Essential container in task exited. Container 'sglang' health"
        " check: UNHEALTHY\n",
    ],
)
def test_a_stop_with_no_platforms_reason_or_drained_cleanly_is_no_kill(log):
    assert run(log).failure_class is not C.KILLED_BY_SIGNAL


@pytest.mark.parametrize(
    "stop",
    [
        # a platform's stop on its own account, shown by the operator's command below
        "$ kubectl get events -A\ndefault   52m   Normal    UpgradeStarted       "
        "node/gke-prod-l4-pool-3f9a-7xkq         Node auto-upgrade to 1.33.5-gke.1080000 "
        "started; draining node",
        "$ kubectl get events -A\n3m          Normal   DisruptionTerminating  "
        "node/ip-10-0-7-43.ec2.internal  Disrupting NodeClaim: Underutilized/Delete",
        # a supervisor's restart whose stop timed out
        "2026-07-21 22:14:31,981 WARN killing 'sglang' (22841) with SIGKILL",
    ],
)
def test_a_stop_whose_grace_period_cut_the_drain_killed_the_server(stop):
    cut = "[2026-07-21 22:14:29] Gracefully exiting... Remaining number of requests 36."
    result = run(f"{SERVING}{SIGTERM}{cut}\n{stop}\n")
    assert result.failure_class is C.KILLED_BY_SIGNAL
    assert result.root_cause_line == stop.splitlines()[-1]
    # the drain that finished was a clean stop, whoever asked for it
    done = cut.replace("requests 36.", "requests 0.")
    assert run(f"{SERVING}{SIGTERM}{done}\n{stop}\n").failure_class is C.NONE


def test_a_cache_evicted_on_demand_is_no_stop_of_anything_that_runs():
    answer = (
        "**Answer:** No. Most of that is radix (prefix) cache that can be evicted on demand, "
        "the scheduler reclaims it under pressure."
    )
    assert run(f"{SERVING}{SERVING}\n{answer}\n").failure_class is C.NONE


@pytest.mark.parametrize(
    "stop",
    [
        "+ docker rm -f sglang-prod sglang-staging",
        "2026-01-21T00:00:01.402117+00:00 inference-02 CRON[190022]: (root) CMD (cd /srv/llm && "
        "/usr/bin/docker compose down >> /var/log/nightly-down.log 2>&1)",
        "Jan 21 00:00:01 inference-02 CRON[190022]: (root) CMD (systemctl restart sglang)",
        "Feb 25 02:30:00 gpu-lab2 CRON[771204]: (tom) CMD (tmux kill-server)",
        "  tmux respawn-pane -k -t \"$p\" 'watch -n 5 nvidia-smi'",
    ],
)
def test_a_script_or_a_cron_job_that_stopped_the_server_killed_it(stop):
    # who stopped it, above the runtime's SIGKILL that followed
    forced = (
        'dockerd[1290]: time="2026-04-02T16:10:33Z" level=info msg="Container failed to exit '
        'within 0s of signal 15 - using the force" container=3e9d1a77c0b2'
    )
    result = run(f"{SERVING}{forced}\n{stop}\n")
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, stop.strip())


def test_the_operators_own_stop_command_is_no_scripted_kill():
    typed = run(f"{SERVING}$ docker compose down\n")
    assert typed.failure_class is not C.KILLED_BY_SIGNAL


def test_a_ctrl_c_typed_after_the_kernels_lines_pasted_below_is_no_stop_of_the_server():
    teardown = (
        "[2026-07-21 22:15:41] SIGQUIT received. signum=None, frame=None. It usually means one "
        "child failed."
    )
    kernel = "[Tue Jul 21 22:14:30 2026] nvme nvme0: I/O 12 QID 3 timeout, completion polled"
    log = f"{SERVING}{teardown}\n$ sudo dmesg -T | tail -1\n{kernel}\n^C\n"
    result = run(log)  # by time the kernel's line and the ^C under it come first
    assert (result.failure_class, result.root_cause_line) == (C.OTHER, teardown)


@pytest.mark.parametrize(
    "waiter",
    [
        "TimeoutError: Server at http://127.0.0.1:31000 did not become healthy within 900s",
        "Error: The action 'Start server and run tests' has timed out after 60 minutes.",
        "openai.APITimeoutError: Request timed out.",
        'error: deployment "sglang-qwen3" exceeded its progress deadline',  # kubectl rollout
    ],
)
def test_a_waiters_or_a_clients_timeout_roots_the_hang_at_the_servers_last_step(waiter):
    stalled = "[2026-01-12 20:15:48 TP1] Init torch distributed begin."
    text = (
        "[2026-01-12 20:15:40] server_args=ServerArgs(model_path='Qwen/Qwen3-14B', tp_size=2)\n"
        "[2026-01-12 20:15:48 TP0] Init torch distributed begin.\n"
        f"{stalled}\n[suite] still waiting (900s)...\n{waiter}\n"
    )
    result = run(text)
    assert (result.failure_class, result.root_cause_line) == (C.HANG_TIMEOUT, stalled)
    # the waiter's words pasted above the server's log: its last step all the same
    above = f"{waiter}\n$ tail sgl.log\n" + text.replace(f"{waiter}\n", "")
    assert (run(above).failure_class, run(above).root_cause_line) == (C.HANG_TIMEOUT, stalled)
    # SGLang's own word that it hung stays the root
    own = (
        "[2026-01-12 20:35:48] Health check failed. Server couldn't get a response from detokenizer"
    )
    assert run(text.replace(waiter, own)).root_cause_line == own


def test_a_ctrl_c_that_ended_a_tail_of_the_log_is_no_stop_of_the_server():
    started = (
        "root@sgl-ct:~# python -m sglang.launch_server --model-path /m --tp 2 > sgl.log 2>&1 &\n"
        "[1] 3318\nroot@sgl-ct:~# tail -f sgl.log\n"
    )
    shards = "Loading safetensors checkpoint shards:  27% Completed | 3/11 [00:19<00:52,  6.53s/it]"
    killed = (
        "[1]+  Killed                  python -m sglang.launch_server --model-path /m --tp 2 "
        "> sgl.log 2>&1"
    )
    result = run(f"{started}{shards}\n^C\nroot@sgl-ct:~#\n{killed}\n")
    assert (result.failure_class, result.root_cause_line) == (C.KILLED_BY_SIGNAL, killed)
    # the server's own Ctrl-C, in the foreground: its SIGKILL of itself is the stop's
    foreground = started.replace(" > sgl.log 2>&1 &\n[1] 3318\nroot@sgl-ct:~# tail -f sgl.log", "")
    assert run(f"{foreground}{shards}\n^C\nKilled\n").failure_class is not C.KILLED_BY_SIGNAL


def test_a_clients_timeout_pasted_above_a_server_that_went_silent_is_the_hang():
    client = "openai.APITimeoutError: Request timed out."
    last = (
        "[2026-02-11 10:05:42] Prefill batch. #new-seq: 1, #new-token: 2048, #cached-token: 0, "
        "token usage: 0.04, #running-req: 3, #queue-req: 0"
    )
    text = (
        f"bench.py output:\n{client}\n\nserver log (last lines):\n{SERVING}{last}\n\n"
        "$ curl -m 30 localhost:30000/health_generate\n"
        "curl: (28) Operation timed out after 30001 milliseconds with 0 bytes received\n"
    )
    assert run(text).failure_class is C.HANG_TIMEOUT
    # a client that stopped waiting on a server that went on serving: no failure
    assert run(f"{client}\n{SERVING}{last}\n").failure_class is C.NONE


def test_a_startup_that_printed_little_but_answers_its_health_check_is_up():
    capture = (
        "Capturing batches (bs=1 avail_mem=3.02 GB): 100%|##########| 23/23 [00:05<00:00,  "
        "4.12it/s]"
    )
    text = (
        "$ python -m sglang.launch_server --model-path /m --port 30000 --log-level warning\n"
        "[2026-03-14 10:00:00] Load weight begin. avail mem=70.00 GB\n"
        f"{capture}\n\n$ curl -s -o /dev/null -w '%{{http_code}}\\n' localhost:30000/health\n"
    )
    assert run(text + "200\n").failure_class is C.NONE
    # no answer: the startup stopped where it printed last
    refused = run(text + "000\n")
    assert (refused.failure_class, refused.root_cause_line) == (C.HANG_TIMEOUT, capture)
