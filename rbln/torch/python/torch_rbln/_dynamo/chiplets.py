"""Where a compiled graph sits on the device, for inspect(): how a program
is split over the RSD group's NPUs and chiplets (SPEC A2, A7) and the device
bytes of its buffers per chiplet."""

from .. import _C


_BUFFER_KINDS = ("inputs", "outputs", "constants")


def partitioning(program, num_npus, device_index) -> dict:
    """How `program` is split over the RSD group of logical device
    `device_index` (SPEC A2, A7): its workers, how many run on each NPU, and
    the workspace bytes (its internal buffers) each run places on each
    chiplet."""
    chiplets = _C._device_profile()["chiplets_per_npu"]
    group = _C._device_map()["devices"][device_index]
    workers = program.num_workers
    per_npu = {}
    workspace = {}
    for w, nbytes in enumerate(program.workspace_bytes):
        npu = group[w // chiplets] if w // chiplets < len(group) else None
        key = f"npu.{npu}.chiplet.{w % chiplets}"
        per_npu[f"npu.{npu}"] = per_npu.get(f"npu.{npu}", 0) + 1
        workspace[key] = workspace.get(key, 0) + nbytes
    return {
        "num_npus": num_npus,
        "workers": workers,
        "workers_per_npu": per_npu,
        "workspace_bytes_per_chiplet": workspace,
    }


def _chiplet_keys():
    """"npu.N.chiplet.C" of every chiplet of the current logical device's
    NPUs (the profile's chiplet count), so inspect() lists empty ones too."""
    profile = _C._device_profile()
    group = _C._device_map()["devices"][_C._current_device()]
    return [f"npu.{npu}.chiplet.{c}" for npu in group for c in range(profile["chiplets_per_npu"])]


def device_buffers_per_chiplet(tensors_by_kind: dict) -> dict:
    """{chiplet: {"inputs", "outputs", "constants", "total"}} device bytes of
    the given tensors' storages (each storage counted once, under its first
    kind); storages without device memory yet (lazy) count nothing."""
    out = {k: dict.fromkeys(_BUFFER_KINDS + ("total",), 0) for k in _chiplet_keys()}
    seen = set()
    for kind in _BUFFER_KINDS:
        for t in tensors_by_kind.get(kind, ()):
            if t is None or t.device.type != "rbln" or t.numel() == 0:
                continue
            base = t.untyped_storage().data_ptr()
            if base in seen:
                continue
            seen.add(base)
            info = _C._storage_info(base)
            if not info["has_device_memory"]:
                continue
            key = f"npu.{info['npu']}.chiplet.{info['chiplet']}"
            entry = out.setdefault(key, dict.fromkeys(_BUFFER_KINDS + ("total",), 0))
            entry[kind] += info["device_bytes"]
            entry["total"] += info["device_bytes"]
    return out


def merge_chiplet_bytes(reports) -> dict:
    """Sums device_buffers_per_chiplet dicts (the segments of one artifact)."""
    out = {k: dict.fromkeys(_BUFFER_KINDS + ("total",), 0) for k in _chiplet_keys()}
    for report in reports:
        for key, entry in report.items():
            target = out.setdefault(key, dict.fromkeys(_BUFFER_KINDS + ("total",), 0))
            for k, v in entry.items():
                target[k] += v
    return out
