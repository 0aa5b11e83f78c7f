"""rbln-smi on stats files written in the publisher's layout (rbln/runtime/stats_publisher.h)."""

import json
import mmap
import os
import subprocess
import sys
import tempfile
import threading
import time

import pytest

import rbln_smi

MIB = 1 << 20


def write(directory, pid, **kwargs):
    path = os.path.join(directory, f"rbln-smi.{pid}")
    with open(path, "wb") as f:
        f.write(rbln_smi._pack_for_tests(pid, **kwargs))
    return path


def dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # Reaped: the pid is free.
    return child.pid


def run_json(capsys, *args):
    assert rbln_smi.main(list(args) + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def smi_dir():
    with tempfile.TemporaryDirectory() as d:
        yield d


def test_layout_matches_the_cpp_header():
    # Offsets from the table in stats_publisher.h.
    data = rbln_smi._pack_for_tests(
        42, {(0, 1): {"allocated_current": 7, "num_alloc_retries": 9}}, chiplets_per_npu=2,
        memory_per_chiplet=3 * MIB, profile="atom", command="python x.py", start_time=11)
    assert len(data) == 256 + 2 * 72
    assert data[0:8] == b"RBLNSMI1"
    assert int.from_bytes(data[8:12], "little") == 1
    assert int.from_bytes(data[12:16], "little") == 256
    assert int.from_bytes(data[16:20], "little") == 72
    assert int.from_bytes(data[20:24], "little") == 42
    assert int.from_bytes(data[24:32], "little") == 11
    assert int.from_bytes(data[40:44], "little") == 1
    assert int.from_bytes(data[44:48], "little") == 2
    assert int.from_bytes(data[48:56], "little") == 3 * MIB
    assert data[56:72].rstrip(b"\0") == b"atom"
    assert data[72:200].rstrip(b"\0") == b"python x.py"
    assert data[200:256] == bytes(56)
    record = 256 + 72
    assert int.from_bytes(data[record + 8:record + 16], "little") == 7
    assert int.from_bytes(data[record + 56:record + 64], "little") == 9
    assert int.from_bytes(data[record + 64:record + 72], "little") == 0  # busy_ns


def test_reads_the_first_64_byte_record_layout():
    # Files of the first layout (no busy_ns) still parse, with busy_ns 0.
    data = bytearray(rbln_smi._pack_for_tests(5, {(0, 0): {"allocated_current": 3, "busy_ns": 8}}))
    header = bytearray(data[:256])
    header[16:20] = (64).to_bytes(4, "little")
    old = bytes(header) + data[256:256 + 64]
    row = rbln_smi.parse_stats(old)["chiplets"][0]
    assert row["allocated_current"] == 3 and row["busy_ns"] == 0
    assert rbln_smi.parse_stats(bytes(data))["chiplets"][0]["busy_ns"] == 8


def test_live_and_stale_processes(smi_dir, capsys):
    me = os.getpid()
    write(smi_dir, me, num_npus=2, chiplets_per_npu=4, memory_per_chiplet=64 * MIB,
          start_time=rbln_smi.proc_start_time(me), command="python train.py --epochs 3",
          records={(1, 2): {"allocated_current": 3 * MIB, "allocated_peak": 5 * MIB,
                            "reserved_current": 20 * MIB, "reserved_peak": 22 * MIB,
                            "active_current": 3 * MIB, "num_ooms": 1, "num_alloc_retries": 2}})
    gone = dead_pid()
    stale_path = write(smi_dir, gone)
    with open(os.path.join(smi_dir, "unrelated.txt"), "w") as f:
        f.write("ignored")

    out = run_json(capsys, "--dir", smi_dir)
    assert out["dir"] == smi_dir
    assert [p["pid"] for p in out["processes"]] == [me]
    p = out["processes"][0]
    assert p["command"] == "python train.py --epochs 3"
    assert p["profile"] == "rebel100"
    assert [(c["npu"], c["chiplet"]) for c in p["chiplets"]] == [(n, c) for n in range(2) for c in range(4)]
    row = p["chiplets"][1 * 4 + 2]
    assert row == {"npu": 1, "chiplet": 2, "allocated_current": 3 * MIB, "allocated_peak": 5 * MIB,
                   "reserved_current": 20 * MIB, "reserved_peak": 22 * MIB, "active_current": 3 * MIB,
                   "num_ooms": 1, "num_alloc_retries": 2, "busy_ns": 0}
    assert all(c["allocated_current"] == 0 for c in p["chiplets"] if c is not row)
    assert out["stale"] == [{"path": stale_path, "pid": gone, "reason": "process is not running",
                             "removed": False}]
    assert out["errors"] == []
    assert "device_summary" in out["machine"], out["machine"]
    assert os.path.exists(stale_path)  # Only --clean removes it.

    assert rbln_smi.main(["--dir", smi_dir]) == 0
    text = capsys.readouterr().out
    assert "torch_rbln device summary" in text
    assert "NPU ids are machine ids" in text
    lines = [line for line in text.splitlines() if line.split()[:3] == [str(me), "1", "2"]]
    assert len(lines) == 1
    assert lines[0].split()[3:8] == ["3.0", "5.0", "20.0", "22.0", "64.0"]
    assert lines[0].endswith("python train.py --epochs 3")
    assert sum(line.split()[:1] == [str(me)] for line in text.splitlines()) == 8
    assert f"stale: {stale_path} (pid {gone}: process is not running; remove with --clean)" in text

    out = run_json(capsys, "--dir", smi_dir, "--clean")
    assert out["stale"][0]["removed"] is True
    assert not os.path.exists(stale_path)
    assert [p["pid"] for p in out["processes"]] == [me]


def test_reused_pid_is_stale(smi_dir, capsys):
    # A live process whose start time is not the writer's: the pid was reused.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        write(smi_dir, other.pid, start_time=rbln_smi.proc_start_time(other.pid) + 1)
        out = run_json(capsys, "--dir", smi_dir)
        assert out["processes"] == []
        assert [(s["pid"], s["reason"]) for s in out["stale"]] == [(other.pid, "pid reused by another process")]
    finally:
        other.kill()
        other.wait()


def test_leftover_temp_file_of_dead_process_is_stale(smi_dir, capsys):
    gone = dead_pid()
    path = os.path.join(smi_dir, f".rbln-smi.{gone}.AbC123")
    open(path, "wb").close()
    out = run_json(capsys, "--dir", smi_dir, "--clean")
    assert [(s["path"], s["removed"]) for s in out["stale"]] == [(path, True)]


def test_bad_files_are_reported_not_fatal(smi_dir, capsys):
    me = os.getpid()
    with open(os.path.join(smi_dir, f"rbln-smi.{me}"), "wb") as f:
        f.write(b"x" * 300)
    out = run_json(capsys, "--dir", smi_dir)
    assert out["processes"] == []
    assert "not an rbln-smi stats file" in out["errors"][0]["error"]


def test_record_stuck_mid_write_is_an_error():
    data = rbln_smi._pack_for_tests(1, seqs={(0, 0): 3})
    with pytest.raises(rbln_smi.StatsFileError, match="record 0 stays mid-write"):
        rbln_smi.parse_stats(data)


def test_reader_never_sees_torn_records(smi_dir):
    # A writer that follows the publisher's seqlock, yielding between stores
    # so the reader often lands mid-write; every field holds the same value.
    path = write(smi_dir, os.getpid())
    offset = rbln_smi.HEADER.size
    stop = threading.Event()

    def writer():
        with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as buf:
            seq, value = 2, 0
            while not stop.is_set():
                value += 1
                rbln_smi.SEQ.pack_into(buf, offset, seq + 1)
                for i in range(len(rbln_smi.RECORD_FIELDS)):
                    rbln_smi.SEQ.pack_into(buf, offset + 8 + 8 * i, value)
                    os.sched_yield()
                seq += 2
                rbln_smi.SEQ.pack_into(buf, offset, seq)
                os.sched_yield()  # Let the reader in between writes too.

    t = threading.Thread(target=writer)
    t.start()
    try:
        # At least 300 reads, and on until the writer has published a few
        # values: the thread may first run only after several reads.
        seen, reads = set(), 0
        deadline = time.monotonic() + 30
        while reads < 300 or (len(seen) < 3 and time.monotonic() < deadline):
            row = rbln_smi.read_stats_file(path)["chiplets"][0]
            values = {row[k] for k in rbln_smi.RECORD_FIELDS}
            assert len(values) == 1, row
            seen |= values
            reads += 1
    finally:
        stop.set()
        t.join()
    assert len(seen) >= 3, seen


def test_default_dir(monkeypatch):
    monkeypatch.setenv("RBLN_SMI_DIR", "/some/where")
    assert rbln_smi.default_dir() == "/some/where"
    monkeypatch.delenv("RBLN_SMI_DIR")
    assert rbln_smi.default_dir() == ("/dev/shm" if os.path.isdir("/dev/shm") else "/tmp")


def test_missing_dir_fails(capsys):
    assert rbln_smi.main(["--dir", "/nonexistent/rbln-smi-dir"]) == 1
    assert "cannot list /nonexistent/rbln-smi-dir" in capsys.readouterr().err


def test_help_names_the_npu_numbering(capsys):
    with pytest.raises(SystemExit):
        rbln_smi.main(["--help"])
    assert "NPU ids are machine ids" in " ".join(capsys.readouterr().out.split())


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
