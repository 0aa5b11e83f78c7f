"""Where a torch.compile(backend="rbln") first call's time goes, for the
benchmarks (model_bench.py, llm_bench.py): the phases the backend records per
compiled graph (inspect()["compile_phases"]) and the compiler's own report
(per program: frontend, MLIR passes, LLVM, segments), summed over graphs, and
a fresh process to measure a first call with cold caches in."""

import json
import os
import subprocess
import tempfile

PHASES = ("dynamo_capture", "aot_autograd", "fx_to_ir", "compile", "constants_upload",
          "first_run")
COMPILER_PHASES = ("frontend_ms", "mlir_passes_ms", "llvm_translate_ms", "llvm_optimize_ms",
                   "llvm_codegen_ms", "disk_load_ms")
_COUNTS = ("segments", "unique_segments", "codegen", "threads")


def collect(graphs) -> dict:
    """{"phases": ms per PHASES, "compiler": summed compile reports} of the
    compiled graphs `graphs` (torch.rbln.compiled_programs() entries)."""
    infos = [g.inspect() for g in graphs]
    phases = {p: sum((i["compile_phases"].get(p) or 0) for i in infos) for p in PHASES}
    reports = [p["compile_report"] for i in infos for p in i["programs"] if "compile_report" in p]
    compiler = {}
    if reports:
        compiler = {k: sum(r[k] for r in reports) for k in reports[0] if k != "threads"}
        compiler["threads"] = max(r["threads"] for r in reports)
    return {"phases": phases, "compiler": compiler}


def format_lines(result) -> list:
    """The phase lines of one first call ({"phases", "compiler"})."""
    lines = []
    ph = result.get("phases")
    if ph:
        lines.append(", ".join(f"{p.replace('_', ' ')} {ph[p]:.1f}" for p in PHASES))
    c = result.get("compiler") or {}
    if c:
        lines.append("compile: " + ", ".join(
            f"{k[:-3].replace('_', ' ')} {c[k]:.1f}" for k in COMPILER_PHASES)
            + f"; {c['segments']} segments, {c['unique_segments']} unique, "
            f"{c['codegen']} compiled on {c['threads']} thread(s)")
    return lines


def run_child(cmd, timeout) -> dict:
    """Runs `cmd` (a benchmark's --child mode, which prints one "RESULT
    <json>" line) in a fresh process with cold caches: no rbln disk cache,
    Inductor's caches in an empty directory, compile errors raised."""
    env = dict(os.environ)
    env.pop("RBLN_COMPILER_CACHE_DIR", None)
    with tempfile.TemporaryDirectory(prefix="bench_first_call_") as cache:
        env.update(TORCHINDUCTOR_CACHE_DIR=cache, TORCHINDUCTOR_FX_GRAPH_CACHE="0",
                   TORCHINDUCTOR_AUTOGRAD_CACHE="0", TRITON_CACHE_DIR=cache,
                   TORCH_RBLN_DISABLE_FALLBACK="compile_error")
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"no result within {timeout} s"}
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": f"exit code {r.returncode}: {tail[:300]}"}
