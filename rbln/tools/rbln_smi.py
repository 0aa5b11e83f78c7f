"""rbln-smi: the simulated RBLN NPUs and the processes using them, like nvidia-smi.

Shows the simulated machine of this environment (torch.rbln.device_summary(),
which only plans and occupies no NPU), then, for every live process that uses
rbln devices, its device memory per chiplet. The simulated NPUs live inside
each process, so there is no driver to ask: each process's runtime publishes
its numbers in <dir>/rbln-smi.<pid> (rbln/runtime/stats_publisher.h).

    python rbln/tools/rbln_smi.py [--json] [--dir DIR] [--clean]
"""

import argparse
import json
import mmap
import os
import re
import struct
import sys
import time

# The file layout. KEEP IN SYNC with rbln/runtime/stats_publisher.h, whose
# comment is the reference (offsets, sizes, the seqlock);
# //rbln/runtime:stats_publisher_test checks the C++ side byte by byte.
MAGIC = b"RBLNSMI1"
VERSION = 1
# magic, version, header_bytes, record_bytes, pid, start_time,
# created_unix_ns, num_npus, chiplets_per_npu, memory_per_chiplet,
# profile name (16), command line (128), reserved (56).
HEADER = struct.Struct("<8sIIIiQqiiQ16s128s56x")
# seq (odd while being written), then the fields below.
RECORD = struct.Struct("<Q8q")
# Records of the first layout (64 bytes, no busy_ns), still read.
RECORD_64 = struct.Struct("<Q7q")
SEQ = struct.Struct("<Q")
RECORD_FIELDS = (
    "allocated_current",
    "allocated_peak",
    "reserved_current",
    "reserved_peak",
    "active_current",
    "num_ooms",
    "num_alloc_retries",
    "busy_ns",
)
assert HEADER.size == 256 and RECORD.size == 72 and RECORD_64.size == 64

ENV_DIR = "RBLN_SMI_DIR"
FILE_RE = re.compile(r"^rbln-smi\.(\d+)$")
# A file being created (renamed into place when complete); left behind only
# if its writer died in between.
TEMP_FILE_RE = re.compile(r"^\.rbln-smi\.(\d+)\.\w{6}$")
# How long to retry a record that is mid-write before giving up on it.
SEQLOCK_TIMEOUT_S = 0.2

NPU_NOTE = (
    "NPU ids are machine ids (the 'machine id' column of device_summary()); inside a "
    "process, device_summary() and memory_summary() number NPUs relative to its "
    "RBLN_VISIBLE_DEVICES, so the two may differ."
)

_MIB = float(1 << 20)


class StatsFileError(ValueError):
    """A file that is not a readable stats file of this version."""


def default_dir():
    """$RBLN_SMI_DIR, else /dev/shm, else /tmp: where the runtime writes."""
    env = os.environ.get(ENV_DIR)
    if env:
        return env
    return "/dev/shm" if os.path.isdir("/dev/shm") else "/tmp"


def proc_start_time(pid):
    """Start time of `pid` in clock ticks since boot (/proc/<pid>/stat field 22), or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces.
    fields = stat[stat.rfind(b")") + 1 :].split()
    try:
        return int(fields[19])  # fields[0] is field 3.
    except (IndexError, ValueError):
        return None


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # Another user's process.
    return True


def _field_str(raw):
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def _read_record(buf, offset, path, index, layout=RECORD):
    deadline = None
    while True:
        before = SEQ.unpack_from(buf, offset)[0]
        if before % 2 == 0:
            values = layout.unpack_from(buf, offset)
            if SEQ.unpack_from(buf, offset)[0] == before == values[0]:
                row = dict.fromkeys(RECORD_FIELDS, 0)
                row.update(zip(RECORD_FIELDS, values[1:]))
                return row
        # Mid-write, or changed while we read: the writer holds a record only
        # for a few stores, so this settles at once unless it died in Publish.
        now = time.monotonic()
        if deadline is None:
            deadline = now + SEQLOCK_TIMEOUT_S
        elif now > deadline:
            raise StatsFileError(f"{path}: record {index} stays mid-write")
        time.sleep(0)


def parse_stats(buf, path="<buffer>"):
    """Parses a stats file's bytes (any buffer; an mmap for live files)."""
    if len(buf) < HEADER.size:
        raise StatsFileError(f"{path}: {len(buf)} bytes, less than a header")
    (magic, version, header_bytes, record_bytes, pid, start_time, created_unix_ns, num_npus,
     chiplets_per_npu, memory_per_chiplet, profile, command) = HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise StatsFileError(f"{path}: not an rbln-smi stats file")
    if version != VERSION:
        raise StatsFileError(f"{path}: version {version}, this rbln-smi reads {VERSION}")
    n = num_npus * chiplets_per_npu
    if (header_bytes < HEADER.size or record_bytes < RECORD_64.size or record_bytes % 8
            or num_npus <= 0 or chiplets_per_npu <= 0 or header_bytes + n * record_bytes > len(buf)):
        raise StatsFileError(
            f"{path}: bad shape ({num_npus} x {chiplets_per_npu} records of {record_bytes} bytes "
            f"after {header_bytes}, file {len(buf)} bytes)")
    chiplets = []
    for i in range(n):
        row = {"npu": i // chiplets_per_npu, "chiplet": i % chiplets_per_npu}
        row.update(_read_record(buf, header_bytes + i * record_bytes, path, i,
                                RECORD if record_bytes >= RECORD.size else RECORD_64))
        chiplets.append(row)
    return {
        "pid": pid,
        "command": _field_str(command),
        "profile": _field_str(profile),
        "num_npus": num_npus,
        "chiplets_per_npu": chiplets_per_npu,
        "memory_per_chiplet": memory_per_chiplet,
        "start_time": start_time,
        "created_unix_ns": created_unix_ns,
        "chiplets": chiplets,
    }


def read_stats_file(path):
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < HEADER.size:
            raise StatsFileError(f"{path}: {size} bytes, less than a header")
        # Mapped, not read(): the seqlock needs the writer's live words.
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return parse_stats(buf, path)


def _pack_for_tests(pid, records=None, *, num_npus=1, chiplets_per_npu=1, memory_per_chiplet=1 << 30,
                    profile="rebel100", command="python train.py", start_time=0, created_unix_ns=None,
                    seqs=None):
    """A stats file's bytes, as the C++ publisher writes them (for tests).

    `records` maps (npu, chiplet) to a dict of RECORD_FIELDS (missing ones are
    0); `seqs` maps (npu, chiplet) to a sequence number (default 2: stable).
    """
    if created_unix_ns is None:
        created_unix_ns = time.time_ns()
    out = bytearray(HEADER.pack(
        MAGIC, VERSION, HEADER.size, RECORD.size, pid, start_time, created_unix_ns, num_npus,
        chiplets_per_npu, memory_per_chiplet, profile.encode()[:16], command.encode()[:128]))
    for npu in range(num_npus):
        for chiplet in range(chiplets_per_npu):
            values = (records or {}).get((npu, chiplet), {})
            seq = (seqs or {}).get((npu, chiplet), 2)
            out += RECORD.pack(seq, *(values.get(k, 0) for k in RECORD_FIELDS))
    return bytes(out)


def scan(directory, clean=False):
    """Stats of live processes, stale files of dead ones and unreadable files."""
    processes, stale, errors = [], [], []
    for name in sorted(os.listdir(directory)):
        m = FILE_RE.match(name) or TEMP_FILE_RE.match(name)
        if not m:
            continue
        path = os.path.join(directory, name)
        pid = int(m.group(1))
        temp = not FILE_RE.match(name)
        reason = None
        if not pid_alive(pid):
            reason = "process is not running"
        elif temp:
            continue  # Being created right now.
        info = None
        if reason is None:
            try:
                info = read_stats_file(path)
            except FileNotFoundError:
                continue  # The process exited while we looked.
            except (OSError, StatsFileError) as e:
                errors.append({"path": path, "pid": pid, "error": str(e)})
                continue
            now = proc_start_time(pid)
            if info["pid"] != pid:
                errors.append({"path": path, "pid": pid, "error": f"file names pid {pid}, header says {info['pid']}"})
                continue
            if info["start_time"] and now is not None and now != info["start_time"]:
                reason = "pid reused by another process"
        if reason is not None:
            entry = {"path": path, "pid": pid, "reason": reason, "removed": False}
            if clean:
                try:
                    os.unlink(path)
                    entry["removed"] = True
                except FileNotFoundError:
                    entry["removed"] = True
                except OSError as e:
                    entry["error"] = str(e)
            stale.append(entry)
            continue
        info["path"] = path
        processes.append(info)
    processes.sort(key=lambda p: p["pid"])
    return processes, stale, errors


def machine_summary():
    """This environment's simulated machine; never raises."""
    try:
        import torch

        if getattr(torch, "rbln", None) is None:
            import torch_rbln  # noqa: F401  (not autoloaded, e.g. TORCH_DEVICE_BACKEND_AUTOLOAD=0)
        return {
            "device_summary": torch.rbln.device_summary(),
            "profile": torch.rbln.get_device_profile(),
        }
    except Exception as e:  # noqa: BLE001  (a bad environment must not hide the process table)
        return {"error": f"{type(e).__name__}: {e}"}


def _mib(nbytes):
    return f"{nbytes / _MIB:.1f}"


def format_text(directory, machine, processes, stale, errors):
    lines = []
    if "error" in machine:
        lines.append(f"torch_rbln device summary unavailable: {machine['error']}")
    else:
        lines.append(machine["device_summary"])
    lines.append("")
    lines.append(f"Processes (stats files in {directory}; sizes in MiB)")
    lines.append(f"  {NPU_NOTE}")
    header = (f"{'pid':>8s} {'npu':>4s} {'chiplet':>7s} {'allocated':>10s} {'alloc peak':>10s} "
              f"{'reserved':>10s} {'resv peak':>10s} {'total':>9s} {'ooms':>5s}  command")
    lines.append(header)
    lines.append("-" * len(header))
    for p in processes:
        for c in p["chiplets"]:
            lines.append(
                f"{p['pid']:8d} {c['npu']:4d} {c['chiplet']:7d} {_mib(c['allocated_current']):>10s} "
                f"{_mib(c['allocated_peak']):>10s} {_mib(c['reserved_current']):>10s} "
                f"{_mib(c['reserved_peak']):>10s} {_mib(p['memory_per_chiplet']):>9s} "
                f"{c['num_ooms']:5d}  {p['command']}")
    if not processes:
        lines.append("  no running process uses rbln devices")
    for s in stale:
        if s["removed"]:
            state = "removed"
        elif "error" in s:
            state = f"cannot remove: {s['error']}"
        else:
            state = "remove with --clean"
        lines.append(f"stale: {s['path']} (pid {s['pid']}: {s['reason']}; {state})")
    for e in errors:
        lines.append(f"unreadable: {e['path']}: {e['error']}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="rbln-smi",
        description="The simulated RBLN NPUs and, per process, device memory per chiplet.",
        epilog=NPU_NOTE + " Files of processes that are gone are reported as stale.",
    )
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON (sizes in bytes)")
    parser.add_argument("--dir", default=None,
                        help=f"directory of the rbln-smi.<pid> files (default: ${ENV_DIR}, else /dev/shm, else /tmp)")
    parser.add_argument("--clean", action="store_true", help="remove stale files of processes that are gone")
    args = parser.parse_args(argv)
    directory = args.dir or default_dir()
    try:
        processes, stale, errors = scan(directory, clean=args.clean)
    except OSError as e:
        print(f"rbln-smi: cannot list {directory}: {e.strerror}", file=sys.stderr)
        return 1
    machine = machine_summary()
    if args.json:
        print(json.dumps({"dir": directory, "machine": machine, "processes": processes,
                          "stale": stale, "errors": errors}, indent=2))
    else:
        print(format_text(directory, machine, processes, stale, errors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
