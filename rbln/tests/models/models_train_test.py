"""Model suite, training: one eager step -- forward with labels, loss,
backward, AdamW -- of each float16 model on rbln against the same step on
the CPU.

Checked in two parts, so that float16 rounding cannot hide or fake a
difference:
  * the loss and every parameter's gradient equal the CPU's (float16
    forward and backward on the CPU from the same weights and inputs);
  * the AdamW step on rbln equals AdamW on the CPU applied to the same
    parameters and the rbln gradients. (Adam's first step is about
    lr * sign(grad): against independently computed CPU gradients, a
    gradient element near zero whose rounding differs flips its update by
    2 * lr, which says nothing about either device.)
Tied weights (GPT-2's lm_head and wte) stay one Parameter through the step,
and their gradient sums both uses, as on the CPU. Ops of the step that ran on
the CPU (dispatch/cpu_fallback) are listed in the results table."""
# spec: B4, G1, I3

import sys

import pytest
import torch
import transformers

import model_zoo
from suite_util import (DEV, Results, ResultsPlugin, assert_still_tied,
                        blocked_on_missing_kernels, counters, fallback_ops, tied_groups, timed)

transformers.logging.set_verbosity_error()
RESULTS = Results(model_zoo.TRAIN, ["rbln_s", "cpu_s", "loss", "worst_grad_rel",
                                    "cpu_fallback_ops"])
LR = 1e-3
# float16 AdamW state: eps must stay representable (1e-8 rounds to 0, and a
# parameter without gradient would then divide 0 by 0).
EPS = 1e-6


def trainable(spec, device):
    model = spec.make().half().train()
    for m in model.modules():  # Dropout masks differ between devices.
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    return model.to(device)


def step(model, inputs, device):
    """Forward with labels, backward; returns (loss, gradients)."""
    batch = {k: (v.half() if v.is_floating_point() else v).to(device) for k, v in inputs.items()}
    labels = model_labels(batch)
    loss = model(**batch, labels=labels).loss
    loss.backward()
    return loss, {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def model_labels(batch):
    if "pixel_values" in batch:
        return torch.tensor([3], device=batch["pixel_values"].device)
    return batch.get("decoder_input_ids", batch.get("input_ids"))


@pytest.mark.parametrize("spec", model_zoo.params(model_zoo.TRAIN))
def test_one_adamw_step_matches_cpu(spec):
    spec.check_blockers(model_zoo.TRAIN)
    inputs = spec.example()
    cpu = trainable(spec, "cpu")
    (cpu_loss, cpu_grads), cpu_s = timed(lambda: step(cpu, inputs, "cpu"), sync=False)

    dev = trainable(spec, "cpu")
    groups = tied_groups(dev)
    dev.to(DEV)
    assert_still_tied(dev, groups)
    start = {n: p.detach().cpu().clone() for n, p in dev.named_parameters()}
    opt = torch.optim.AdamW(dev.parameters(), lr=LR, eps=EPS)
    c0 = counters()
    (loss, grads), rbln_s = timed(lambda: blocked_on_missing_kernels(
        lambda: step(dev, inputs, DEV)))
    opt.step()
    torch.rbln.synchronize()
    c1 = counters()

    torch.testing.assert_close(loss.detach().cpu().float(), cpu_loss.detach().float(),
                               atol=1e-2, rtol=1e-2)
    assert grads.keys() == cpu_grads.keys()
    # Norm-wise, relative to the gradient or (for gradients that are zero in
    # exact arithmetic, e.g. attention's key bias) to 1% of the largest one.
    floor = 1e-2 * max(g.float().norm().item() for g in cpu_grads.values())
    worst = 0.0
    for name, want in cpu_grads.items():
        got = grads[name]
        assert got.device == torch.device(DEV), name
        want = want.float()
        err = (got.cpu().float() - want).norm().item() / max(want.norm().item(), floor)
        worst = max(worst, err)
        assert err < 2e-2, f"{spec.name}: gradient of {name} differs from the CPU's by {err:.3g}"

    # The device step against AdamW on the CPU from the same parameters and
    # the rbln gradients.
    ref = {n: torch.nn.Parameter(p.clone()) for n, p in start.items()}
    for n, p in ref.items():
        p.grad = grads[n].detach().cpu() if n in grads else None
    torch.optim.AdamW(ref.values(), lr=LR, eps=EPS).step()
    for name, p in dev.named_parameters():
        torch.testing.assert_close(p.detach().cpu(), ref[name].detach(), atol=2e-3, rtol=2e-3,
                                   msg=lambda m, name=name: f"{spec.name}: {name} after AdamW: {m}")
    assert_still_tied(dev, groups)
    RESULTS.add(spec.name, rbln_s=rbln_s, cpu_s=cpu_s, loss=loss.item(), worst_grad_rel=worst,
                cpu_fallback_ops=fallback_ops(c0, c1))


def test_gpt2_tied_lm_head_trains_as_one_parameter():
    # spec: B4 -- the acceptance: lm_head.weight is
    # transformer.wte.weight on rbln (one storage), and its one-step update
    # equals the CPU's (the gradient sums the embedding and the head).
    spec = model_zoo.SPECS["gpt2"]
    inputs = spec.example()
    cpu = trainable(spec, "cpu")
    dev = trainable(spec, DEV)
    assert dev.lm_head.weight is dev.transformer.wte.weight
    assert (dev.lm_head.weight.untyped_storage().data_ptr()
            == dev.transformer.wte.weight.untyped_storage().data_ptr())
    for model, device in ((cpu, "cpu"), (dev, DEV)):
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        step(model, inputs, device)
        opt.step()
    assert dev.lm_head.weight is dev.transformer.wte.weight
    torch.testing.assert_close(dev.transformer.wte.weight.detach().cpu().float(),
                               cpu.transformer.wte.weight.detach().float(), atol=2e-3, rtol=2e-3)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"], plugins=[ResultsPlugin()]))
