"""Model suite, eager mode: each transformers model's float16 forward on rbln
equals the float32 CPU forward (same float16-rounded weights) within float16
tolerance, and tied weights stay tied on `.to("rbln")`."""
# spec: G1, B4, D8

import sys

import pytest
import torch
import transformers

import model_zoo
from suite_util import (DEV, Results, ResultsPlugin, assert_close_fp16, assert_still_tied,
                        best_of, blocked_on_missing_kernels, counters, fallback_ops, logits,
                        tied_groups, timed, to_device)

transformers.logging.set_verbosity_error()
RESULTS = Results(model_zoo.EAGER, ["first_s", "warm_ms", "cpu_ms", "rbln_over_cpu",
                                    "max_abs_err", "cpu_fallback_ops"])


@pytest.mark.parametrize("spec", model_zoo.params(model_zoo.EAGER))
def test_eager_forward_matches_cpu(spec):
    spec.check_blockers(model_zoo.EAGER)
    model = spec.make()
    inputs = spec.example()
    with torch.no_grad():
        want = logits(model(**inputs))
        cpu_ms = best_of(lambda: model(**inputs)) * 1e3
    groups = tied_groups(model)
    dev = model.half().to(DEV)
    assert_still_tied(dev, groups)
    dev_inputs = to_device(inputs)
    c0 = counters()
    with torch.no_grad():
        out, first = timed(lambda: blocked_on_missing_kernels(lambda: logits(dev(**dev_inputs))))
        c1 = counters()
        warm = best_of(lambda: dev(**dev_inputs))
    assert out.device == torch.device(DEV) and out.dtype == torch.float16
    assert_close_fp16(out, want, f"{spec.name} logits")
    RESULTS.add(spec.name, first_s=first, warm_ms=warm * 1e3, cpu_ms=cpu_ms,
                rbln_over_cpu=warm * 1e3 / cpu_ms,
                max_abs_err=(out.cpu().float() - want).abs().max().item(),
                cpu_fallback_ops=fallback_ops(c0, c1))


def _deit():
    # DeiT initialises its class and distillation tokens and its position
    # embeddings to zero: their rows enter the first LayerNorm constant.
    return transformers.DeiTForImageClassification(transformers.DeiTConfig(
        image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, num_labels=10))


def _vit_zero_class_token():
    model = model_zoo.SPECS["vit"].build()
    torch.nn.init.zeros_(model.vit.embeddings.cls_token)
    torch.nn.init.zeros_(model.vit.embeddings.position_embeddings)
    return model


def _bert_zero_padding_row():
    # The padding token's word embedding is zero at init; with zero position
    # and token-type embeddings a padding token's row is zero too.
    model = model_zoo.SPECS["bert"].build()
    torch.nn.init.zeros_(model.bert.embeddings.position_embeddings.weight)
    torch.nn.init.zeros_(model.bert.embeddings.token_type_embeddings.weight)
    return model


def _image(g):
    return {"pixel_values": torch.randn(1, 3, 32, 32, generator=g)}


def _padded_tokens(g):
    ids = torch.randint(3, model_zoo.VOCAB, (1, 8), generator=g)
    ids[0, 5:] = 0  # Padding (pad_token_id 0), attended to as plain tokens.
    return {"input_ids": ids}


@pytest.mark.parametrize("build,inputs", [
    pytest.param(_deit, _image, id="deit"),
    pytest.param(_vit_zero_class_token, _image, id="vit"),
    pytest.param(_bert_zero_padding_row, _padded_tokens, id="bert"),
])
def test_eager_forward_with_zero_token_rows_matches_cpu(build, inputs):
    # spec: G1 -- issue 28: a row with zero variance (DeiT's zero-initialised
    # tokens, a padding row) meets LayerNorm(eps=1e-12). PyTorch computes the
    # norm of a float16 input in float32 with eps in float32 (the CPU gives
    # zeros there); computed in float16, eps rounds to 0 and the row became
    # 0 * inf = NaN logits.
    torch.manual_seed(0)
    model = build().eval()
    assert model.config.layer_norm_eps == 1e-12
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())
        x = inputs(torch.Generator().manual_seed(1))
        want = logits(model(**x))
        got = logits(model.half().to(DEV)(**to_device(x)))
    assert not got.cpu().isnan().any(), "NaN logits"
    assert_close_fp16(got, want, "logits")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"], plugins=[ResultsPlugin()]))
