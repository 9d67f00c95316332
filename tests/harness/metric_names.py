"""Every metric name the daemon exports: the one list the offline tests share.

tests/ops/test_dashboard.py allows a dashboard query only these names and requires each of them
on some panel; tests/ops/test_alerts.py allows the alerting rules and their promtool tests only
these names, and checks the list against the collector itself (exporter/metrics.py and the
families of every telemetry source: exporter/telemetry/probes.py, processes.py, gpu/families.py,
health.py), so a metric added, renamed or removed there fails until this list follows. Counters are listed as exposed, with `_total`.

The end-to-end test tests/e2e/test_observability_stack.py checks the dashboard's names
against the live exposition of a running daemon scraped by a real Prometheus.
"""

from __future__ import annotations

EXPORTED_METRICS: frozenset[str] = frozenset(
    {
        # The daemon and its server (exporter/metrics.py).
        "sglang_sentinel_build_info",
        "sglang_sentinel_server_state",
        "sglang_sentinel_server_up",
        "sglang_sentinel_attempts_total",
        "sglang_sentinel_restarts_total",
        "sglang_sentinel_failures_total",
        "sglang_sentinel_last_failure_timestamp_seconds",
        "sglang_sentinel_profile_info",
        "sglang_sentinel_fallback_level",
        "sglang_sentinel_startup_duration_seconds",
        # Memory pools, from the log.
        "sglang_sentinel_kv_cache_tokens",
        "sglang_sentinel_memory_pool_bytes",
        "sglang_sentinel_mamba_cache_slots",
        "sglang_sentinel_weights_bytes",
        "sglang_sentinel_device_available_bytes",
        # Startup progress, from SGLang's progress bars and milestones.
        "sglang_sentinel_startup_progress_ratio",
        "sglang_sentinel_startup_last_progress_timestamp_seconds",
        # The pre-flight's prediction for the next or current launch.
        "sglang_sentinel_planned_kv_cache_tokens",
        "sglang_sentinel_planned_verdict",
        # The log, hangs and automatic remedies.
        "sglang_sentinel_log_lines_total",
        "sglang_sentinel_log_last_line_timestamp_seconds",
        "sglang_sentinel_log_last_batch_timestamp_seconds",
        "sglang_sentinel_hangs_total",
        "sglang_sentinel_automatic_remedies_total",
        # Runtime, from the batch lines.
        "sglang_sentinel_running_requests",
        "sglang_sentinel_queued_requests",
        "sglang_sentinel_token_usage_ratio",
        "sglang_sentinel_generation_throughput_tokens_per_second",
        "sglang_sentinel_retractions_total",
        # Health probes (exporter/telemetry/probes.py).
        "sglang_sentinel_health_probe_success",
        "sglang_sentinel_health_probe_duration_seconds",
        # The attempt's processes (exporter/telemetry/processes.py; reaped: exporter/metrics.py).
        "sglang_sentinel_processes",
        "sglang_sentinel_process_resident_memory_bytes",
        "sglang_sentinel_process_cpu_seconds_total",
        "sglang_sentinel_zombie_processes",
        "sglang_sentinel_reparented_processes",
        "sglang_sentinel_reaped_processes_total",
        # GPUs, through NVML (exporter/telemetry/gpu/families.py).
        "sglang_sentinel_gpu_info",
        "sglang_sentinel_gpu_memory_total_bytes",
        "sglang_sentinel_gpu_memory_used_bytes",
        "sglang_sentinel_gpu_memory_free_bytes",
        "sglang_sentinel_gpu_memory_reserved_bytes",
        "sglang_sentinel_gpu_process_memory_bytes",
        "sglang_sentinel_gpu_foreign_memory_bytes",
        "sglang_sentinel_gpu_unknown_memory_bytes",
        "sglang_sentinel_gpu_xid_errors_total",
        "sglang_sentinel_gpu_xid_last_timestamp_seconds",
        # The collectors' own health (exporter/telemetry/health.py).
        "sglang_sentinel_collector_success",
        "sglang_sentinel_collector_duration_seconds",
        "sglang_sentinel_collector_last_success_timestamp_seconds",
    }
)
