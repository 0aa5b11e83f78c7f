"""The main job: a small real workload on the simulated NPU.

Only `import torch` is needed: the installed torch_rbln wheel registers the
`rbln` device through torch's backend entry point.

The last part runs a small Llama-architecture transformers model: eager,
compiled (the whole forward as one rbln program, a [clean] warm step), and
greedy generation with the static KV cache against the CPU. Should the
graph not compile, the compile_error fallback runs it on the CPU and the
demo prints the error instead of the program count.
"""

import time

import torch

LLAMA_NEW_TOKENS = 8


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


def tiny_llama():
    """A Llama-architecture transformers model (grouped-query attention, RoPE,
    RMSNorm, SwiGLU): random init with a fixed seed, config in code (no hub)."""
    import transformers

    transformers.logging.set_verbosity_error()
    config = transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256, max_position_embeddings=64,
        initializer_range=0.2)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    model.generation_config.pad_token_id = 0
    # float16 weights on the device; the CPU reference holds the same values.
    return model.half().float()


def generate_rate(model, ids, runs=2):
    """(new tokens, tokens/s) of greedy generation with transformers' static
    KV cache; the first run warms up (compiles)."""
    for _ in range(runs):
        t0 = time.perf_counter()
        out = model.generate(ids, max_new_tokens=LLAMA_NEW_TOKENS, do_sample=False,
                             eos_token_id=None, cache_implementation="static")
        torch.rbln.synchronize()
        seconds = time.perf_counter() - t0
    return out[0, ids.shape[1]:].cpu(), LLAMA_NEW_TOKENS / seconds


def llama() -> bool:
    """The Llama model in eager mode, compiled (the whole forward as one
    program; if it does not compile, the compile_error fallback runs it on
    the CPU and this says so), and greedy generation with the static KV cache
    against the CPU."""
    import warnings

    from torch_rbln import _dynamo as rbln_dynamo

    print("\n== a Llama-architecture transformers model (2 layers, hidden 64, GQA, RoPE, "
          "RMSNorm, SwiGLU; random init)")
    cpu = tiny_llama()
    ids = torch.randint(3, 256, (1, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = cpu(ids).logits
    model = tiny_llama().half().to("rbln")
    dev_ids = ids.to("rbln")
    with torch.no_grad():
        eager = model(dev_ids).logits
    err = (eager.cpu().float() - reference).abs().max().item()
    ok = err < 5e-2
    print(f"eager forward: logits {list(eager.shape)} {eager.dtype}; max |rbln - CPU float32| = "
          f"{err:.4f} -> {'OK' if ok else 'MISMATCH'}")

    torch._dynamo.reset()
    compiled = torch.compile(model, backend="rbln", dynamic=False)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Reported below instead.
        t0 = time.perf_counter()
        out = compiled(dev_ids).logits
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        compiled(dev_ids)
        torch.rbln.synchronize()
        warm = time.perf_counter() - t0
        with torch.rbln.explain() as region:
            compiled(dev_ids)
    err = (out.cpu().float() - reference).abs().max().item()
    ok = err < 5e-2 and ok
    failures = rbln_dynamo.compile_failures()
    if failures:
        _, error = failures[0]
        print(f"torch.compile(backend='rbln'): the graph does not compile yet "
              f"({type(error).__name__}: {str(error).splitlines()[0]}); the compile_error "
              f"fallback ran it on the CPU: first call {first:.1f} s, warm {warm * 1e3:.1f} ms")
    else:
        programs = sum(len(g.inspect()["programs"]) for g in torch.rbln.compiled_programs())
        print(f"torch.compile(backend='rbln'): {programs} rbln program(s); first call (capture + "
              f"compile) {first:.1f} s, warm {warm * 1e3:.2f} ms")
    print(f"compiled output: max |rbln - CPU float32| = {err:.4f} -> {'OK' if err < 5e-2 else 'MISMATCH'}")
    print(f"explain() of a warm compiled step: {region.verdict()}")
    print(region.report())

    print(f"greedy generation, static KV cache, {LLAMA_NEW_TOKENS} new tokens:")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want, cpu_rate = generate_rate(cpu, ids, runs=1)
        got, eager_rate = generate_rate(model, dev_ids)
        torch._dynamo.reset()
        model.forward = torch.compile(model.forward, backend="rbln", dynamic=False)
        got_compiled, compiled_rate = generate_rate(model, dev_ids)
        del model.forward  # Back to the class's eager forward.
    fell_back = bool(rbln_dynamo.compile_failures())
    for name, rate, tokens in (("CPU float32 (eager)", cpu_rate, want),
                               ("rbln eager", eager_rate, got),
                               ("rbln compiled forward" + (" (CPU fallback)" if fell_back else ""),
                                compiled_rate, got_compiled)):
        print(f"  {name:38s} {rate:7.1f} tokens/s  tokens {tokens.tolist()}"
              + ("" if tokens is want else f"  equal to CPU: {torch.equal(tokens, want)}"))
    return ok and torch.equal(got, want) and torch.equal(got_compiled, want)


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

    print("\n== torch.rbln.explain(): a warm step, then one with hidden host work")
    with torch.rbln.explain() as clean:
        (da + db).cpu()
    print(clean.report())
    with torch.rbln.explain(with_stack=True) as bad:
        (da.float() + 1).cpu()  # float32 on the device: a dtype conversion and a CPU fallback
    print(bad.report())

    ok = transformer_step() and ok
    ok = llama() and ok

    print("\n== device memory (lazy: acquired at first device use)")
    print(torch.rbln.memory_summary())

    print("\n== counters (totals; explain() and torch.rbln.counters() have them per op)")
    for k, v in torch.rbln.counters().items():
        if v and k.count("/") == 1:
            print(f"  {k:42s} {v}")
    if not ok:
        raise SystemExit("demo: results differ from PyTorch CPU")


if __name__ == "__main__":
    main()
