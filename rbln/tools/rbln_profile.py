"""rbln-profile: reads an RBLN Profiler file (rbln_<timestamp>.pb, SPEC O4).

    python rbln_profile.py rbln_20261129172800123.pb                 # per-stage summary
    python rbln_profile.py rbln_....pb --trace trace.json            # + Chrome/Perfetto trace

The file is one `rbln.runtime.profile.Profile` message (schema:
rbln/runtime/profile.proto). This tool decodes the protobuf wire format
itself, so it needs no protobuf package; the field numbers below must match
the schema.

The trace opens in Perfetto (ui.perfetto.dev) or chrome://tracing: one
process row per NPU ("RBLN NPU n"), with a thread row for argument transfer
stages and one for compute per chiplet worker (a partitioned program reports
one compute slice per worker), and a complete event per execution.
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
    },
}
_REPEATED = {("Profile", "executions"), ("Execution", "stages")}
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


def to_chrome_trace(profile):
    """Chrome trace-event JSON (a dict) of a decoded profile."""
    offset_us = profile["clock_offset_ns"] / 1000.0
    events = []
    npus = sorted({e["npu"] for e in profile["executions"]})
    workers = sorted({s["worker"] for e in profile["executions"] for s in e["stages"] if s["kind"] == 2} | {0})
    for npu in npus:
        pid = f"RBLN NPU {npu}"
        events.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": pid}})
        rows = [(0, "execution"), (1, "args (transfer)")]
        rows += [(2 + w, "compute" if w == 0 else f"compute W{w}") for w in workers]
        for tid, name in rows:
            events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
    for e in profile["executions"]:
        pid = f"RBLN NPU {e['npu']}"
        events.append(
            {
                "ph": "X",
                "cat": "rbln_execution",
                "name": f"i{e['id']}_{e['program']}",
                "pid": pid,
                "tid": 0,
                "ts": e["start_ns"] / 1000.0 + offset_us,
                "dur": (e["end_ns"] - e["start_ns"]) / 1000.0,
                "args": {"id": e["id"], "program": e["program"]},
            }
        )
        for s in e["stages"]:
            kind = STAGE_KINDS.get(s["kind"], str(s["kind"]))
            events.append(
                {
                    "ph": "X",
                    "cat": kind.lower(),
                    "name": f"i{e['id']}_{s['name']}",
                    "pid": pid,
                    # One compute row per chiplet worker (SPEC O2).
                    "tid": 2 + s["worker"] if kind == "COMPUTE" else 1,
                    "ts": s["start_ns"] / 1000.0 + offset_us,
                    "dur": (s["end_ns"] - s["start_ns"]) / 1000.0,
                    "args": {"execution": e["id"], "program": e["program"], "bytes": s["bytes"]},
                }
            )
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"pid": profile["pid"]}}


def summary(profile):
    """Per program and stage kind: count, total and average device time."""
    rows = collections.OrderedDict()
    for e in profile["executions"]:
        for s in e["stages"]:
            key = (e["program"], STAGE_KINDS.get(s["kind"], str(s["kind"])))
            r = rows.setdefault(key, [0, 0, 0])
            r[0] += 1
            r[1] += s["end_ns"] - s["start_ns"]
            r[2] += s["bytes"]
    width = max([len("program")] + [len(p) for p, _ in rows])
    lines = [
        f"{'program':<{width}}  {'stage':<8}  {'count':>6}  {'total ms':>10}  {'avg us':>10}  {'bytes':>12}",
    ]
    for (program, kind), (n, ns, nbytes) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
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
