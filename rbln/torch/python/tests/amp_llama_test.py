"""A Hugging Face Llama (small, random init, config built here: no hub) under
torch.autocast("rbln", torch.bfloat16): the eager forward and GradScaler
training steps match the same steps under CPU autocast, and every
autocast-listed op the model calls returns the dtype of CUDA's policy."""
# spec: none -- torch.cuda parity (issue 18): the HF acceptance.

import collections
import sys
import warnings

import pytest
import torch
from torch.overrides import TorchFunctionMode

import autocast_policy

transformers = pytest.importorskip("transformers")

POLICY = autocast_policy.policy_by_op()
# Python names of policy ops as torch functions and Tensor methods.
ALIASES = {"__matmul__": "matmul", "__rmatmul__": "matmul", "__pow__": "pow"}


def _models():
    config = transformers.LlamaConfig(
        vocab_size=128, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
        attn_implementation="eager",  # matmul + softmax, the ops autocast lists
    )
    torch.manual_seed(0)
    cpu = transformers.LlamaForCausalLM(config)
    rbln = transformers.LlamaForCausalLM(config)
    rbln.load_state_dict(cpu.state_dict())
    return cpu.train(), rbln.to("rbln").train()


class PolicyRecorder(TorchFunctionMode):
    """Checks the output dtype of every call of an autocast-listed op."""

    def __init__(self, autocast_dtype):
        super().__init__()
        self.autocast_dtype = autocast_dtype
        self.seen = collections.Counter()
        self.wrong = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        name = ALIASES.get(name, name)
        policy = POLICY.get(name)
        if policy is not None and isinstance(out, torch.Tensor) and out.is_floating_point():
            inputs = {a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()}
            explicit = (kwargs or {}).get("dtype")  # An explicit dtype wins (softmax(dtype=...)).
            expected = explicit or autocast_policy.expected_dtype(policy, self.autocast_dtype, inputs)
            self.seen[name] += 1
            if out.dtype != expected:
                self.wrong.append((name, policy, out.dtype, expected))
        return out


def _close(a, b, tol):
    return abs(a - b) <= tol * max(1.0, abs(b))


def test_eager_forward_follows_cuda_policy_and_matches_cpu_autocast():
    cpu, rbln = _models()
    ids = torch.randint(0, 128, (2, 32))
    recorder = PolicyRecorder(torch.bfloat16)
    with torch.no_grad():
        with recorder, torch.autocast("rbln", dtype=torch.bfloat16):
            out = rbln(ids.to("rbln"), labels=ids.to("rbln"))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ref = cpu(ids, labels=ids)
    assert not recorder.wrong, recorder.wrong
    # The Llama block's listed ops: projections, attention matmuls, the
    # attention softmax, RMSNorm's pow and rsqrt.
    assert {"linear", "matmul", "softmax", "pow", "rsqrt"} <= set(recorder.seen), recorder.seen
    assert out.logits.device.type == "rbln" and out.logits.dtype == ref.logits.dtype == torch.bfloat16
    torch.testing.assert_close(out.logits.cpu().float(), ref.logits.float(), atol=5e-2, rtol=5e-2)
    assert _close(out.loss.item(), ref.loss.item(), 1e-2), (out.loss.item(), ref.loss.item())


def _step(model, opt, scaler, ids, device):
    opt.zero_grad()
    with torch.autocast(device, dtype=torch.bfloat16):
        loss = model(ids, labels=ids).loss
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    return loss.item()


def test_grad_scaler_training_steps_match_cpu_autocast():
    cpu, rbln = _models()
    ids = torch.randint(0, 128, (2, 32))
    opt = torch.optim.AdamW(rbln.parameters(), lr=1e-3)
    cpu_opt = torch.optim.AdamW(cpu.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("rbln", init_scale=2.0**10)
    cpu_scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # The host-bounce notice of dtype-converting copies.
        losses = [(_step(rbln, opt, scaler, ids.to("rbln"), "rbln"), _step(cpu, cpu_opt, cpu_scaler, ids, "cpu"))
                  for _ in range(3)]
    for step, (loss, cpu_loss) in enumerate(losses):
        assert _close(loss, cpu_loss, 1e-2), (step, losses)
    assert losses[-1][0] < losses[0][0]  # It trains.
    assert scaler.get_scale() == cpu_scaler.get_scale()
    assert scaler._scale.device.type == "rbln"
    for (name, p), q in zip(rbln.named_parameters(), cpu.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), atol=2e-2, rtol=2e-2, msg=name)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
