"""The main job: a small real workload on the simulated NPU.

Only `import torch` is needed: the installed torch_rbln wheel registers the
`rbln` device through torch's backend entry point.
"""

import time

import torch


def counters_delta(before, after, prefix):
    return {
        k[len(prefix):]: after[k] - before.get(k, 0)
        for k in sorted(after)
        if k.startswith(prefix) and after[k] != before.get(k, 0)
    }


def transformer_step() -> bool:
    """A GPT-2-style block's forward step compiled with torch.compile(backend="rbln")
    as one program; checked against PyTorch CPU float32 (SPEC J3, J7, N4)."""
    from torch_rbln.testing.gpt2_block import make_block

    print("\n== torch.compile(backend='rbln'): a GPT-2-style block forward step")
    kwargs = dict(dim=128, heads=2, vocab=256, max_seq=64)
    idx = torch.randint(0, 256, (2, 64), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = make_block(dtype=torch.float32, **kwargs)(idx)
    block = make_block(**kwargs).to("rbln")
    step = torch.compile(block, backend="rbln", dynamic=False)
    # The recommended composition: the input lives in a bound device buffer,
    # refilled in place each step; the output stays on the device.
    tokens = torch.empty_like(idx, device="rbln")
    torch.rbln.bind_device_memory(tokens)
    timings = []
    with torch.no_grad():
        for call in (1, 2, 3):
            tokens.copy_(idx)
            t0 = time.perf_counter()
            out = step(tokens)
            torch.rbln.synchronize()
            timings.append((time.perf_counter() - t0) * 1e3)
        with torch.rbln.explain() as region:
            tokens.copy_(idx)
            out = step(tokens)
    print(f"first call (capture + compile) {timings[0]:.0f} ms, warm calls "
          f"{timings[1]:.2f} ms, {timings[2]:.2f} ms")
    got = out.cpu().float()
    err = (got - reference).abs().max().item()
    ok = torch.allclose(got, reference, atol=2e-2, rtol=2e-2)
    print(f"output {list(out.shape)} {out.dtype} on {out.device}; max |rbln - CPU float32| = "
          f"{err:.4f} -> {'OK' if ok else 'MISMATCH'}")
    for program in torch.rbln.compiled_programs():
        info = program.inspect()
        print("compiled programs:", len(info["programs"]), "| ops:",
              ", ".join(sorted(set(info["programs"][0]["ops"]))))
    print(region.report())
    return ok


def main():
    print(torch.rbln.device_summary())

    # SPEC B3.
    print("\n== SPEC B3")
    with torch.rbln.device(0):
        x = torch.tensor([1, 2], dtype=torch.float16, device="rbln")
        y = torch.tensor([3, 4], dtype=torch.float16, device="rbln")
        z = x + y
    print("z.device =", z.device)
    print(z.cpu())

    # A few more ops: compiled adds (bf16, broadcasting, in-place) and one op
    # that runs through the CPU fallback.
    print("\n== compiled add: first call compiles, the second hits the warm cache")
    torch.manual_seed(0)
    a = torch.randn(256, 1024, dtype=torch.bfloat16)
    b = torch.randn(1024, dtype=torch.bfloat16)
    da, db = a.to("rbln"), b.to("rbln")
    for call in (1, 2):
        before = torch.rbln.counters()
        t0 = time.perf_counter()
        out = da + db
        ms = (time.perf_counter() - t0) * 1e3
        after = torch.rbln.counters()
        print(
            f"call {call}: {ms:8.2f} ms  compiles +{after['compiler/compiles'] - before.get('compiler/compiles', 0)}"
            f"  warm hits +{after['dispatch/warm_hits'] - before.get('dispatch/warm_hits', 0)}"
        )
    ok = torch.equal(out.cpu(), a + b)
    print("bf16 [256,1024] + [1024] equals PyTorch CPU:", ok)

    da.add_(db, alpha=2)
    print("in-place add_ equals CPU:", torch.equal(da.cpu(), torch.add(a, b, alpha=2)))

    before = torch.rbln.counters()
    m = (da * 0.5).cpu()
    after = torch.rbln.counters()
    print("mul ran through the CPU fallback:", counters_delta(before, after, "dispatch/cpu_fallback/"))
    assert torch.equal(m, torch.add(a, b, alpha=2) * 0.5)

    print("\n== torch.rbln.explain(): a warm step, then one with hidden host work")
    with torch.rbln.explain() as clean:
        (da + db).cpu()
    print(clean.report())
    with torch.rbln.explain(with_stack=True) as bad:
        (da.float() + 1).cpu()  # float32 on the device: a dtype conversion and a CPU fallback
    print(bad.report())

    ok = transformer_step() and ok

    print("\n== device memory (lazy: acquired at first device use)")
    print(torch.rbln.memory_summary())

    print("\n== counters")
    for k, v in torch.rbln.counters().items():
        if v and not k.startswith("dispatch/cpu_fallback/"):
            print(f"  {k:42s} {v}")
    if not ok:
        raise SystemExit("demo: results differ from PyTorch CPU")


if __name__ == "__main__":
    main()
