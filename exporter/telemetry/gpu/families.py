"""The GPU metric families of one snapshot; pure, so scrapes never touch NVML."""

from __future__ import annotations

from collections.abc import Iterable

from exporter.exposition import Family, sentinel_counter, sentinel_gauge
from exporter.telemetry.gpu.snapshot import GpuDevice, GpuSnapshot, XidCount

DEVICE_LABELS = ["gpu", "uuid"]


def gpu_families(snapshot: GpuSnapshot) -> list[Family]:
    return _device_families(snapshot.devices) + _xid_families(snapshot.xids)


def _device_families(devices: Iterable[GpuDevice]) -> list[Family]:
    info = sentinel_gauge("gpu_info", "A GPU NVML reports; always 1.", [*DEVICE_LABELS, "name"])
    total = sentinel_gauge("gpu_memory_total_bytes", "Device memory.", DEVICE_LABELS)
    used = sentinel_gauge("gpu_memory_used_bytes", "Device memory allocated.", DEVICE_LABELS)
    free = sentinel_gauge("gpu_memory_free_bytes", "Device memory free.", DEVICE_LABELS)
    reserved = sentinel_gauge(
        "gpu_memory_reserved_bytes", "Device memory the driver reserves.", DEVICE_LABELS
    )
    process = sentinel_gauge(
        "gpu_process_memory_bytes",
        "Device memory our processes hold, per role and TP rank.",
        [*DEVICE_LABELS, "role", "tp_rank"],
    )
    foreign = sentinel_gauge(
        "gpu_foreign_memory_bytes", "Device memory processes not ours hold.", DEVICE_LABELS
    )
    unknown = sentinel_gauge(
        "gpu_unknown_memory_bytes",
        "Device memory whose holder cannot be told (unmatched pids, sizes NVML does not know).",
        DEVICE_LABELS,
    )
    for device in devices:
        labels = [str(device.index), device.uuid]
        info.add([*labels, device.name], 1)
        total.add(labels, device.total_bytes)
        used.add(labels, device.used_bytes)
        free.add(labels, device.free_bytes)
        if device.reserved_bytes is not None:
            reserved.add(labels, device.reserved_bytes)
        for (role, rank), size in sorted(device.role_bytes().items()):
            process.add([*labels, role, rank], size)
        foreign.add(labels, device.foreign_bytes)
        unknown.add(labels, device.unknown_bytes)
    return [info, total, used, free, reserved, process, foreign, unknown]


def _xid_families(xids: Iterable[XidCount]) -> list[Family]:
    xid_labels = [*DEVICE_LABELS, "xid"]
    errors = sentinel_counter("gpu_xid_errors", "XID critical errors NVML reported.", xid_labels)
    last = sentinel_gauge(
        "gpu_xid_last_timestamp_seconds", "When the last XID of each kind came.", xid_labels
    )
    for x in xids:
        labels = [str(x.gpu), x.uuid, str(x.xid)]
        errors.add(labels, x.count)
        last.add(labels, x.last_time)
    return [errors, last]
