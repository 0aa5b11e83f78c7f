"""Smoke test of the LLM benchmark at tiny widths (no timing asserted): the
Llama architecture runs every variant through prefill and static-cache decode
and reports its first calls in fresh processes with their phases (the
generate step and the plain forward), Qwen runs on rbln and the CPU, and
--regions (nested compile regions) gives the unmarked run's tokens; decode compiles nothing in its timed loop, and device
memory and the read bandwidth are reported."""
# spec: J1, J3, J7

import json
import os
import tempfile

import llm_bench


def run(tmp, *flags):
    out = os.path.join(tmp, "llm.json")
    assert llm_bench.main([
        "--tiny", "--layers", "2", "--prefill", "8", "--batch", "1,2", "--decode-tokens", "3",
        "--decode-prefill", "8", "--iters", "1", "--max-cache-len", "32", "--json", out,
        *flags]) == 0
    with open(out) as f:
        return json.load(f)


def check_rows(r, variants):
    assert not r["notes"] and not r["errors"], r
    assert set(r["rows"]) == {"prefill 8", "decode b1", "decode b2"}
    for key, row in r["rows"].items():
        for label in variants:
            assert row[label]["ms"] > 0, (key, label, row)
        if key.startswith("decode"):
            assert row["_recompiles"] == {"dynamo graphs": 0, "rbln graph compiles": 0}, row
            batch = int(key[len("decode b"):])
            tokens = row["rbln bf16"]["tokens"]
            assert len(tokens) == batch and len(tokens[0]) == 4, tokens
    assert max(r["bandwidth"].values()) > 0
    assert r["peak"] and r["peak"][1] > 0, r["peak"]
    assert r["rows"]["prefill 8"]["_flops"] > 0 and r["rows"]["prefill 8"]["_torch_gemm_gflops"] > 0
    m = r["memory"]
    assert m["device_peak_bytes"] >= r["weight_bytes"] + m["kv_bytes"], m


def test_llama_every_variant_and_first_calls():
    with tempfile.TemporaryDirectory() as tmp:
        (r,) = run(tmp, "--models", "llama")
    check_rows(r, llm_bench.VARIANTS)
    deep, shallow = r["first_call"]
    assert (deep["layers"], shallow["layers"]) == (2, 1), r["first_call"]
    for f in (deep, shallow):
        assert "error" not in f, f
        for what in ("prefill", "decode", "forward"):
            assert f[what]["first_call_ms"] > 0
            assert f[what]["phases"]["compile"] > 0, f
            assert f[what]["phases"]["dynamo_capture"] > 0, f


def test_qwen_on_rbln_and_cpu_eager():
    with tempfile.TemporaryDirectory() as tmp:
        (r,) = run(tmp, "--models", "qwen", "--variants", "rbln,eager", "--no-first-call")
    check_rows(r, ("rbln bf16", "cpu eager bf16"))


def test_regions_give_the_same_tokens():
    """--regions: the rbln model's decoder layers are nested compile
    regions; its greedy tokens equal the unmarked run's."""
    with tempfile.TemporaryDirectory() as tmp:
        (plain,) = run(tmp, "--models", "llama", "--variants", "rbln", "--no-first-call")
        (marked,) = run(tmp, "--models", "llama", "--variants", "rbln", "--no-first-call",
                        "--regions")
    check_rows(marked, ("rbln bf16",))
    for key in ("decode b1", "decode b2"):
        assert marked["rows"][key]["rbln bf16"]["tokens"] == plain["rows"][key]["rbln bf16"]["tokens"]


def test_real_configs_match_the_published_shapes():
    llama = llm_bench.config_for("llama")
    assert (llama.num_hidden_layers, llama.hidden_size, llama.intermediate_size,
            llama.num_attention_heads, llama.num_key_value_heads, llama.head_dim,
            llama.vocab_size, llama.tie_word_embeddings) == (
                16, 2048, 8192, 32, 8, 64, 128256, True)
    assert llama.rope_parameters["rope_type"] == "llama3"
    assert llama.rope_parameters["factor"] == 32.0
    qwen = llm_bench.config_for("qwen")
    assert (qwen.num_hidden_layers, qwen.hidden_size, qwen.intermediate_size,
            qwen.num_attention_heads, qwen.num_key_value_heads, qwen.vocab_size,
            qwen.tie_word_embeddings) == (28, 1536, 8960, 12, 2, 151936, True)
    assert llm_bench.config_for("llama", layers=3).num_hidden_layers == 3


if __name__ == "__main__":
    import sys

    import pytest

    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
