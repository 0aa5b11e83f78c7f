"""rbln-profile: reads an RBLN Profiler file (rbln_<timestamp>.pb, SPEC O4).

    python rbln_profile.py rbln_20261129172800123.pb                 # per-stage summary
    python rbln_profile.py rbln_....pb --trace trace.json            # + Chrome/Perfetto trace

The file is one `rbln.runtime.profile.Profile` message (schema:
rbln/runtime/profile.proto). This tool decodes the protobuf wire format
itself, so it needs no protobuf package; the field numbers below must match
the schema.

The trace opens in Perfetto (ui.perfetto.dev) or chrome://tracing: one
process row per NPU ("RBLN NPU n"), with a thread row for argument transfer
stages, one for compute stages -- one per phase of the program, the
stretches between the barriers of a program partitioned over the chiplet
workers -- and, as their detail, one row per chiplet worker with its slice of
each phase that several workers ran; and a complete event per execution.
The summary has a row per program and stage kind, and per program and
worker for those slices.
"""

import argparse
import collections
import json
import sys

# Wire types.
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5

# Field numbers of profile.proto: name -> (number, kind). kind is "int",
# "sint" (two's-complement int64/int32 in a varint), "str" or a message name.
_SCHEMA = {
    "Profile": {
        1: ("version", "int"),
        2: ("pid", "sint"),
        3: ("clock_offset_ns", "sint"),
        4: ("executions", "Execution"),
        5: ("dropped_executions", "int"),
    },
    "Execution": {
        1: ("id", "int"),
        2: ("program", "str"),
        3: ("npu", "sint"),
        4: ("start_ns", "sint"),
        5: ("end_ns", "sint"),
        6: ("stages", "Stage"),
        7: ("correlation_id", "int"),
    },
    "Stage": {
        1: ("name", "str"),
        2: ("kind", "int"),
        3: ("start_ns", "sint"),
        4: ("end_ns", "sint"),
        5: ("bytes", "int"),
        6: ("worker", "sint"),
        7: ("phase", "sint"),
        8: ("workers", "WorkerSlice"),
    },
    "WorkerSlice": {
        1: ("worker", "sint"),
        2: ("start_ns", "sint"),
        3: ("end_ns", "sint"),
        4: ("npu", "sint"),
        5: ("chiplet", "sint"),
    },
}
_REPEATED = {("Profile", "executions"), ("Execution", "stages"), ("Stage", "workers")}
STAGE_KINDS = {0: "UNSPECIFIED", 1: "ARGS", 2: "COMPUTE"}


class ProfileFormatError(ValueError):
    pass


def _varint(buf, pos):
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ProfileFormatError(f"truncated varint at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProfileFormatError(f"varint too long at byte {pos}")


def _signed(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def decode(buf, message="Profile"):
    """Decodes `buf` as `message` into a dict (missing fields get defaults)."""
    fields = _SCHEMA[message]
    out = {}
    for name, kind in fields.values():
        if (message, name) in _REPEATED:
            out[name] = []
        else:
            out[name] = "" if kind == "str" else (0 if kind in ("int", "sint") else None)
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, pos = _varint(buf, pos)
        elif wire == _LEN:
            n, pos = _varint(buf, pos)
            if pos + n > len(buf):
                raise ProfileFormatError(f"field {number} of {message} runs past the end")
            value, pos = buf[pos : pos + n], pos + n
        elif wire == _I64:
            value, pos = int.from_bytes(buf[pos : pos + 8], "little"), pos + 8
        elif wire == _I32:
            value, pos = int.from_bytes(buf[pos : pos + 4], "little"), pos + 4
        else:
            raise ProfileFormatError(f"unsupported wire type {wire} for field {number} of {message}")
        if number not in fields:
            continue  # A newer writer's field: skip it, as protobuf does.
        name, kind = fields[number]
        if kind == "str":
            value = bytes(value).decode("utf-8")
        elif kind == "sint":
            value = _signed(value)
        elif kind in _SCHEMA:
            value = decode(value, kind)
        if (message, name) in _REPEATED:
            out[name].append(value)
        else:
            out[name] = value
    return out


def load(path):
    with open(path, "rb") as f:
        return decode(f.read())


def _worker_slices(stage):
    """The per-worker slices shown as a compute stage's detail: those of a
    phase that several workers ran (a phase of one worker is its slice)."""
    if stage["kind"] != 2 or len(stage["workers"]) < 2:
        return []
    return stage["workers"]


def to_chrome_trace(profile):
    """Chrome trace-event JSON (a dict) of a decoded profile."""
    offset_us = profile["clock_offset_ns"] / 1000.0
    events = []
    npus = sorted({e["npu"] for e in profile["executions"]})
    workers = sorted({w["worker"] for e in profile["executions"] for s in e["stages"] for w in _worker_slices(s)})
    for npu in npus:
        pid = f"RBLN NPU {npu}"
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": pid}})
        rows = [(0, "execution"), (1, "args (transfer)"), (2, "compute")]
        rows += [(3 + w, f"compute W{w}") for w in workers]
        for tid, name in rows:
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})

    def complete(cat, name, pid, tid, start_ns, end_ns, args):
        return {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": pid,
            "tid": tid,
            "ts": start_ns / 1000.0 + offset_us,
            "dur": (end_ns - start_ns) / 1000.0,
            "args": args,
        }

    for e in profile["executions"]:
        pid = f"RBLN NPU {e['npu']}"
        events.append(
            complete("rbln_execution", f"i{e['id']}_{e['program']}", pid, 0, e["start_ns"], e["end_ns"],
                     {"id": e["id"], "program": e["program"]})
        )
        for s in e["stages"]:
            kind = STAGE_KINDS.get(s["kind"], str(s["kind"]))
            args = {"execution": e["id"], "program": e["program"], "bytes": s["bytes"]}
            if kind == "COMPUTE":
                args["phase"] = s["phase"]
            events.append(
                complete(kind.lower(), f"i{e['id']}_{s['name']}", pid, 2 if kind == "COMPUTE" else 1,
                         s["start_ns"], s["end_ns"], args)
            )
            # The chiplet workers' part of the phase, one row each (SPEC O2).
            for w in _worker_slices(s):
                events.append(
                    complete("compute_slice", f"i{e['id']}_{s['name']}_W{w['worker']}", pid, 3 + w["worker"],
                             w["start_ns"], w["end_ns"],
                             {"execution": e["id"], "program": e["program"], "phase": s["phase"],
                              "worker": w["worker"], "npu": w.get("npu", 0),
                              "chiplet": w.get("chiplet", 0)})
                )
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"pid": profile["pid"]}}


def summary(profile):
    """Per program and stage kind (and per program and chiplet worker, for
    the workers' slices of multi-worker phases): count, total and average
    device time."""
    rows = collections.OrderedDict()

    def add(key, ns, nbytes):
        r = rows.setdefault(key, [0, 0, 0])
        r[0] += 1
        r[1] += ns
        r[2] += nbytes

    for e in profile["executions"]:
        for s in e["stages"]:
            add((e["program"], STAGE_KINDS.get(s["kind"], str(s["kind"]))), s["end_ns"] - s["start_ns"], s["bytes"])
            for w in _worker_slices(s):
                add((e["program"], f"  W{w['worker']}"), w["end_ns"] - w["start_ns"], 0)
    width = max([len("program")] + [len(p) for p, _ in rows])
    lines = [
        f"{'program':<{width}}  {'stage':<8}  {'count':>6}  {'total ms':>10}  {'avg us':>10}  {'bytes':>12}",
    ]
    # Programs by their total device time; within one, ARGS, COMPUTE, then
    # its worker slices.
    program_ns = collections.Counter()
    for (program, kind), (_, ns, _) in rows.items():
        if not kind.startswith(" "):
            program_ns[program] += ns
    order = {"ARGS": 0, "COMPUTE": 1}
    for (program, kind), (n, ns, nbytes) in sorted(
        rows.items(), key=lambda kv: (-program_ns[kv[0][0]], kv[0][0], order.get(kv[0][1], 2), kv[0][1])
    ):
        lines.append(f"{program:<{width}}  {kind:<8}  {n:>6}  {ns * 1e-6:>10.3f}  {ns / n * 1e-3:>10.1f}  {nbytes:>12}")
    lines.append(
        f"{len(profile['executions'])} executions, {profile['dropped_executions']} dropped, pid {profile['pid']}"
    )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("profile", help="an rbln_<timestamp>.pb file")
    parser.add_argument("--trace", help="write a Chrome/Perfetto trace JSON here")
    args = parser.parse_args(argv)
    try:
        profile = load(args.profile)
    except (OSError, ProfileFormatError) as e:
        print(f"rbln-profile: cannot read {args.profile}: {e}", file=sys.stderr)
        return 1
    print(summary(profile))
    if args.trace:
        with open(args.trace, "w") as f:
            json.dump(to_chrome_trace(profile), f)
        print(f"trace: {args.trace}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
