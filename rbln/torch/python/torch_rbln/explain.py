"""`torch.rbln.explain()`: the hidden backend work of a region (SPEC N1-N4).

    with torch.rbln.explain(with_stack=True) as r:
        step()
    print(r.report())          # the text report
    assert r.verdict() == "clean", r.report()
    json.dumps(r.to_dict())    # the same facts, structured

The region diffs the backend's process-wide event counters between entry and
exit (the runtime and dispatch layer bump them where the events happen; see
`torch.rbln.counters()`), so it sees work of every thread. Recording costs
nothing extra: counters are bumped anyway. Only with `with_stack=True` does a
signal site ask Python for the user's source line, and only for signals.

What the report counts, mapped to the runtime's real events:

  rebel runtime: N program runs, T in librbln
      programs the executor ran (runtime/executions) and the time spent inside
      them (runtime/execution_ns), excluding argument mapping and transfers.
  inter-NPU link: N split runs, workers on npu.A (W), npu.B (W)
      only when programs split over several NPUs of an RSD group ran
      (runtime/multi_npu_executions): how many, and the worker slices each
      NPU ran (runtime/slices/npu.N.chiplet.C) -- the work across NPUs.
  v2h BYTES/N
      host reads of rbln ("virtual") storage: .cpu(), .item(), the inputs of
      CPU fallbacks and of the NaN/Inf check (storage/host_reads). Served from
      the host copy when it is current, else after a real D2H (see below).
      The source of a host bounce is read from device memory: always a D2H.
  h2v BYTES/N
      host writes into rbln storage: .to("rbln"), copy_ from CPU, fills, the
      outputs of CPU fallbacks (storage/host_writes). They land in the host
      copy; the push below is what actually crosses to the device.
  host->device push (runtime): N pushes, BYTES
      every synchronous host->device DMA of the runtime (runtime/dma_h2d_*):
      uploads of host-latest storages at their first device use -- an op's
      inputs, the source of a device copy or host bounce -- (storage/uploads)
      plus writes into device-latest storages, which go through to device
      memory (storage/host_pushes).
  >> physical d2h (real transfer): N copies, BYTES
      every device->host DMA of the runtime (runtime/dma_d2h_*): downloads of
      device-latest storages (storage/downloads) and host-bounce reads. v2h
      minus these were served from host memory without crossing.

Signals: hidden host overhead; any signal makes the region "overhead".

  host_bounce/d2d_copy   a device-to-device copy (converting a dtype, or
                         between overlapping views) that the runtime did
                         through host memory: the source read back by a real
                         D2H, the result written as a host write.
  runtime/v2v_slow       a device-to-device copy between chiplets (or NPUs)
                         instead of within one (storage/d2d_cross_chiplet_copies).
  dispatch/cpu_fallback  an op ran on the CPU (arguments to the host, results
                         back), with why: unsupported_op (no rbln kernel),
                         dtype, scalar, nan_inf, argument, device, output,
                         compile_error (also "graph NAME: compile_error": a
                         torch.compile graph ran whole on the CPU), host_op
                         (an op of a compiled graph ran on the host, SPEC
                         J6); pinned_to_cpu for ops pinned to the
                         CPU (SPEC I5), which have a fast host path and are
                         not optimization candidates.
  dispatch/recompile     a call went through the compile path inside the
                         region: a new program was compiled (warm up first),
                         or a call failed the alignment / storage-offset check
                         that runs after every warm-cache miss, so it is
                         re-checked (and runs on the CPU) on every call.

Optimization candidates: the ops of both fallback signals (pinned ops
aside), each with `| try:` the fix of its reasons (pad the last dim to a
multiple of 64, start the view at offset 0, use float16/bfloat16, ...).

Copies between logical devices are not counted as signals (SPEC L4).
"""

import collections
import threading
import time

from . import _C

__all__ = ["explain", "ExplainRegion"]

# The signals, in report order, with the note printed in the table.
_SIGNAL_NOTES = collections.OrderedDict(
    [
        ("host_bounce/d2d_copy", "real d2h DMA (costly) | try: make contiguous, or v2v engine"),
        ("runtime/v2v_slow", "d2d copy across chiplets | try: torch.rbln.set_device_layout_like(dst, src)"),
        ("dispatch/cpu_fallback", "ran on CPU, args via host | try: supported dtype/op, or torch.compile"),
        ("dispatch/recompile", "compile path in region | try: warm up, last dim % 64 == 0, offset 0"),
    ]
)
# The fix of each fallback reason, for the optimization candidates (a reason
# not listed, e.g. a compile error's text, keeps the generic hint).
_FIXES = {
    "unsupported_op": "no rbln kernel: torch.compile the block",
    "dtype": "use float16 or bfloat16 (one dtype per op)",
    "scalar": "pass a Python number, not a 0-dim rbln tensor",
    "nan_inf": "replace NaN/Inf in the inputs (e.g. torch.nan_to_num) or torch.compile the block",
    "alignment": "pad the last dim to a multiple of 64, or torch.compile the block",
    "storage_offset": "make the view start at offset 0 (.clone() it) or torch.compile the block",
    "device": "put every tensor argument on the same rbln device",
    "compile_error": "report the compile error; torch.compile the block meanwhile",
    "host_op": "a host op inside a compiled graph (its inspect()['host_ops'] names the "
               "reason): avoid data-dependent shapes and float64 there, or wait for the op "
               "in the compiler",
}
# A torch.compile graph that failed to compile ran whole on the CPU.
_GRAPH_COMPILE_ERROR_FIX = (
    "torch_rbln._dynamo.compile_failures() names the missing ops; "
    "options={'host_ops': 'unimplemented'} runs only those on the host")
_SDPA_QUERY_FIX = "pad the query length to a multiple of 32, or torch.compile the block"
_GENERIC_FIX = "supported dtype/op, or torch.compile"


def _fix(why, op="") -> str:
    if why == "compile_error" and op.startswith("graph "):
        return _GRAPH_COMPILE_ERROR_FIX
    if why.startswith("query sequence length"):
        return _SDPA_QUERY_FIX
    return _FIXES.get(why, _GENERIC_FIX)


# Short names for the `checked:` line of clean reports.
_CHECKED = ["host_bounce", "v2v_slow", "cpu_fallback", "recompile"]

_lock = threading.Lock()
_active = None  # The region being recorded; regions do not nest.


def _bytes(n) -> str:
    n = int(n)
    if n < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024.0
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}"
    return f"{n:.1f} GiB"


def _seconds(s) -> str:
    if s < 1e-3:
        return f"{s * 1e6:.0f} us"
    if s < 1.0:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def _machine_npus():
    """Machine ids of every NPU used by a logical device, or [] if the
    environment cannot be planned."""
    try:
        m = _C._device_map()
    except (ValueError, RuntimeError):
        return []
    return sorted({n for npus in m["devices"] for n in npus})


def _delta(before, after, key) -> int:
    return after.get(key, 0) - before.get(key, 0)


class ExplainRegion:
    """The `with` object of torch.rbln.explain(); read it after the block."""

    def __init__(self, with_stack: bool = False):
        self.with_stack = bool(with_stack)
        self._before = None
        self._after = None
        self._events = []
        self._start = 0.0
        self._wall = 0.0
        self._memory = None
        self._done = False

    # -- recording -----------------------------------------------------------

    def __enter__(self):
        global _active
        with _lock:
            if _active is not None:
                raise RuntimeError(
                    "torch.rbln.explain() regions cannot nest: another region "
                    f"(entered {'with' if _active.with_stack else 'without'} with_stack) "
                    "is still recording in this process; end it before starting a new one, "
                    "or wrap the outer region only"
                )
            if self._before is not None:
                raise RuntimeError("this torch.rbln.explain() region was already used; create a new one")
            _active = self
        capturing = False
        try:
            if self.with_stack:
                _install_location_provider()
                _C._explain_begin_capture()
                capturing = True
            self._npus = _machine_npus()
            if _C._is_committed():
                for npu in self._npus:
                    _C._reset_peak_memory_stats(npu)
            self._before = dict(_C._counters())
            self._start = time.perf_counter()
        except BaseException:
            if capturing:
                _C._explain_end_capture()
            with _lock:
                _active = None
            raise
        return self

    def __exit__(self, *exc):
        global _active
        try:
            self._wall = time.perf_counter() - self._start
            self._after = dict(_C._counters())
            if self.with_stack:
                self._events = list(_C._explain_end_capture())
            self._memory = self._read_memory()
        finally:
            self._done = True
            with _lock:
                _active = None
        return False

    def _read_memory(self):
        if not _C._is_committed():
            return {"peak_allocated_bytes": 0, "reserved_bytes": 0}
        peak = reserved = 0
        for npu in self._npus:
            total = _C._memory_stats(npu)["total"]
            peak += total["allocated_bytes.all.peak"]
            reserved += total["reserved_bytes.all.current"]
        return {"peak_allocated_bytes": peak, "reserved_bytes": reserved}

    def _check_done(self, what):
        if not self._done:
            raise RuntimeError(
                f"torch.rbln.explain(): {what}() is available after the `with` block ends; "
                "call it outside the block"
            )

    # -- the facts -----------------------------------------------------------

    def _d(self, key) -> int:
        return _delta(self._before, self._after, key)

    def _details(self, signal):
        """{detail: count} of a signal's detail counters in the region."""
        prefix = f"signal/{signal}/detail/"
        out = collections.OrderedDict()
        for key in sorted(self._after):
            if key.startswith(prefix):
                n = self._d(key)
                if n:
                    out[key[len(prefix):]] = n
        return out

    def _locations(self, signal):
        out = collections.OrderedDict()
        for name, _detail, _nbytes, where in self._events:
            if name == signal:
                where = where or "<unknown: no Python frame outside torch>"
                out[where] = out.get(where, 0) + 1
        return out

    def _signals(self):
        signals = collections.OrderedDict()
        for name, note in _SIGNAL_NOTES.items():
            count = self._d(f"signal/{name}/count")
            nbytes = self._d(f"signal/{name}/bytes")
            why = self._details(name)
            if name == "dispatch/recompile":
                compiles = self._d("compiler/compiles")
                if compiles:
                    count += compiles
                    why[f"compiled {compiles} new program(s) in the region"] = compiles
            if count:
                signals[name] = {
                    "count": count,
                    "bytes": nbytes,
                    "note": note,
                    "why": dict(why),
                    "where": dict(self._locations(name)),
                }
        return signals

    def _candidates(self):
        """Ops that ran through the generic boxed CPU fallback (no fast host
        path), most frequent first."""
        ops = collections.OrderedDict()
        for signal in ("dispatch/cpu_fallback", "dispatch/recompile"):
            for detail, n in self._details(signal).items():
                op, _, why = detail.rpartition(": ")
                if why == "pinned_to_cpu":
                    continue  # Has a fast host path (SPEC I5).
                entry = ops.setdefault(op, {"op": op, "count": 0, "why": [], "fix": []})
                entry["count"] += n
                if why not in entry["why"]:
                    entry["why"].append(why)
                    if _fix(why, op) not in entry["fix"]:
                        entry["fix"].append(_fix(why, op))
        return sorted(ops.values(), key=lambda e: (-e["count"], e["op"]))

    def _slices_per_npu(self) -> dict:
        """{"npu.N": worker slices run on that NPU's compute units}."""
        out = {}
        for key in self._after:
            if not key.startswith("runtime/slices/npu."):
                continue
            n = self._d(key)
            if n:
                npu = ".".join(key.split("/")[-1].split(".")[:2])
                out[npu] = out.get(npu, 0) + n
        return dict(sorted(out.items()))

    def verdict(self) -> str:
        """"clean" when no signal fired in the region, else "overhead"."""
        self._check_done("verdict")
        return "overhead" if self._signals() else "clean"

    def to_dict(self) -> dict:
        """The report's facts as JSON-serializable data (for CI asserts)."""
        self._check_done("to_dict")
        signals = self._signals()
        h2d_count = self._d("runtime/dma_h2d_copies")
        return {
            "verdict": "overhead" if signals else "clean",
            "with_stack": self.with_stack,
            "wall_seconds": self._wall,
            "device_memory": dict(self._memory),
            "runtime": {
                "program_runs": self._d("runtime/executions"),
                "execution_seconds": self._d("runtime/execution_ns") * 1e-9,
                "compiles": self._d("compiler/compiles"),
                "multi_npu_runs": self._d("runtime/multi_npu_executions"),
                "slices_per_npu": self._slices_per_npu(),
                "v2h": {"count": self._d("storage/host_reads"), "bytes": self._d("storage/host_read_bytes")},
                "h2v": {"count": self._d("storage/host_writes"), "bytes": self._d("storage/host_write_bytes")},
                "push": {
                    "count": h2d_count,
                    "bytes": self._d("runtime/dma_h2d_bytes"),
                    "uploads": self._d("storage/uploads"),
                    "write_through": self._d("storage/host_pushes"),
                },
                "physical_d2h": {
                    "count": self._d("runtime/dma_d2h_copies"),
                    "bytes": self._d("runtime/dma_d2h_bytes"),
                },
            },
            "signals": signals,
            "checked": list(_CHECKED),
            "optimization_candidates": self._candidates(),
        }

    # -- the text ------------------------------------------------------------

    def report(self) -> str:
        """The text report (SPEC N2/N3 layout)."""
        self._check_done("report")
        d = self.to_dict()
        rt = d["runtime"]
        signals = d["signals"]
        mem = d["device_memory"]
        if signals:
            n = len(signals)
            tag = f"[overhead: {n} signal{'s' if n != 1 else ''}]"
        else:
            tag = "[clean]"
        lines = [
            f"{tag}  RBLN EXPLAIN   (region wall {_seconds(d['wall_seconds'])} | device mem "
            f"{_bytes(mem['peak_allocated_bytes'])} peak, {_bytes(mem['reserved_bytes'])} reserved)",
            "",
            f"  rebel runtime: {rt['program_runs']} program runs, "
            f"{_seconds(rt['execution_seconds'])} in librbln",
            f"    v2h {_bytes(rt['v2h']['bytes'])}/{rt['v2h']['count']}  "
            f"h2v {_bytes(rt['h2v']['bytes'])}/{rt['h2v']['count']}",
        ]
        if rt["multi_npu_runs"]:
            # Programs split over several NPUs of the group ran (SPEC A7).
            per_npu = ", ".join(f"{npu} ({n})" for npu, n in rt["slices_per_npu"].items())
            lines.append(f"  inter-NPU link: {rt['multi_npu_runs']} split runs, "
                         f"worker slices on {per_npu}")
        push = rt["push"]
        push_line = f"  host->device push (runtime): {push['count']} pushes, {_bytes(push['bytes'])}"
        if push["count"]:
            push_line += f" ({push['uploads']} at device use, {push['write_through']} write-through)"
        lines.append(push_line)
        d2h = rt["physical_d2h"]
        d2h_line = (
            f"  >> physical d2h (real transfer): {d2h['count']} copies, {_bytes(d2h['bytes'])} "
            "-- real device crossing"
        )
        if not signals:
            lines += [
                f"  checked: {', '.join(_CHECKED)} -- none fired",
                '  note: clean = no hidden host overhead, not "fast"',
                "",
                d2h_line,
            ]
            return "\n".join(lines) + "\n"

        lines.append("")
        rows = [(name, str(s["count"]), _bytes(s["bytes"]), s["note"]) for name, s in signals.items()]
        header = ("Signal", "Count", "Bytes", "Note")
        widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(4)]
        widths[0] = max(widths[0], 20)
        widths[1] = max(widths[1], 5)
        widths[2] = max(widths[2], 5)
        rule = "  ".join("-" * w for w in widths)

        def row(cells):
            return "  ".join(
                [
                    cells[0].ljust(widths[0]),
                    cells[1].rjust(widths[1]),
                    cells[2].rjust(widths[2]),
                    cells[3],
                ]
            ).rstrip()

        lines += [rule, row(header), rule]
        lines += [row(r) for r in rows]
        lines.append(rule)
        for name, s in signals.items():
            if not s["why"] and not s["where"]:
                continue
            lines += ["", f"  {name}:"]
            for why, n in s["why"].items():
                lines.append(f"    why: {why}" + (f"  (x{n})" if n > 1 else ""))
            for where, n in s["where"].items():
                lines.append(f"    at {where}" + (f"  (x{n})" if n > 1 else ""))
        lines += ["", d2h_line]
        candidates = d["optimization_candidates"]
        if candidates:
            lines += ["", "  optimization candidates (ran on CPU through the generic fallback, no fast host path):"]
            for c in candidates:
                lines.append(
                    f"    {c['op']}  x{c['count']}  ({', '.join(c['why'])}) | try: {'; '.join(c['fix'])}"
                )
        return "\n".join(lines) + "\n"

    def __repr__(self):
        if not self._done:
            return f"<torch.rbln.explain region (with_stack={self.with_stack}), recording>"
        return f"<torch.rbln.explain region: {self.verdict()}>"


_provider_installed = False


def _install_location_provider():
    global _provider_installed
    if not _provider_installed:
        from . import _user_source_location

        _C._set_signal_location_provider(_user_source_location)
        _provider_installed = True


def explain(with_stack: bool = False) -> ExplainRegion:
    """Records hidden backend work in a `with` block (SPEC N1).

    with_stack: also record the user's source line of every signal
        ("at file.py:LINE(func) <- caller"); costs a Python frame walk per
        signal, nothing when no signal fires.

    Regions cover the whole process (all threads) and do not nest: entering
    one while another records raises RuntimeError. Entering resets the peak
    device memory statistics (as torch.rbln.reset_peak_memory_stats() does)
    so that the header's peak is the region's own. After the block, read
    `report()`, `verdict()` or `to_dict()`.
    """
    return ExplainRegion(with_stack=with_stack)
