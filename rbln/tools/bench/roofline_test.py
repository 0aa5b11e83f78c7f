"""The ceilings llm_bench measures a prefill against: the flop count agrees
with the model's own linear layers, and the arithmetic peak is measured
(compute_peak_bench runs and its output is read)."""
# spec: none (benchmark tooling: issue 29 item 1, the LLM benchmark)

import sys

import torch

import llm_bench
import roofline


def linear_weights(model):
    """Elements of the decoder layers' nn.Linear weights, counted from the
    model itself."""
    return sum(m.weight.numel() for name, m in model.named_modules()
               if isinstance(m, torch.nn.Linear) and ".layers." in name)


def test_linear_params_are_the_models_own():
    for name in ("llama", "qwen"):
        model, config = llm_bench.build(name, layers=2, tiny=True)
        assert roofline.decoder_linear_params(config) == linear_weights(model), name


def test_prefill_flops_count_linear_attention_and_the_kept_head():
    _, config = llm_bench.build("llama", layers=2, tiny=True)
    length = 8
    linear = 2 * length * roofline.decoder_linear_params(config)
    # 2 layers x heads x 36 causal (query, key) pairs x 4 flops per element
    # of a 16-wide head (a score's and a value's multiply-add).
    attention = 2 * config.num_attention_heads * 36 * 4 * 16
    head = 2 * config.hidden_size * config.vocab_size
    assert roofline.prefill_flops(config, length) == linear + attention + head
    assert (roofline.prefill_flops(config, length, kept_logits=length)
            == linear + attention + length * head)


def test_parse_peaks_reads_the_units_and_skips_the_rest():
    text = ("compute_peak_bench: 2 thread(s), 5 reps, 1 x 12 instructions per thread\n"
            "unit        best GFLOP/s median GFLOP/s\n"
            "bf16_dot           462.9          460.3\n"
            "f32_fma512         233.3          232.1\n"
            "checksum 3.22e+10\n")
    assert roofline.parse_peaks(text) == {"bf16_dot": 462.9, "f32_fma512": 233.3}


def test_compute_peak_is_measured():
    unit, gflops = roofline.compute_peak(iters=1 << 16)
    assert unit in roofline.PEAK_UNITS
    assert gflops > 1.0, (unit, gflops)


def test_torch_gemm_rate_is_positive():
    _, config = llm_bench.build("llama", layers=1, tiny=True)
    assert roofline.torch_gemm_rate(8, config, iters=3) > 0


if __name__ == "__main__":
    import pytest

    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
