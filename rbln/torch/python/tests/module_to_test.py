"""nn.Module.to("rbln") and back keeps Parameter objects, as on CUDA: tied
weights stay one Parameter with one device storage, optimizers built before
the move keep working, buffers and grads move, dtype conversions combine.

Module._apply moves a parameter in place (`param.data = moved`) only when
torch._has_compatible_shallow_copy_type(param, moved) is True; rbln answers
True between dense CPU and rbln tensors (minimal_ops.cc)."""
# spec: B4, G1

import sys

import pytest
import torch

DEV = "rbln:0"


class TiedLM(torch.nn.Module):
    """An embedding tied to the output projection (GPT-2's lm_head), a
    float buffer and an integer buffer."""

    def __init__(self, vocab=64, dim=64):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.norm = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("scale", torch.full((dim,), 0.5))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, ids):
        return self.head(self.norm(self.embed(ids)) * self.scale)


def storage_ptr(t):
    return t.untyped_storage().data_ptr()


def test_compatible_shallow_copy_type_between_cpu_and_rbln():
    cpu = torch.ones(4)
    dev = torch.ones(4, device=DEV)
    assert torch._has_compatible_shallow_copy_type(cpu, dev)
    assert torch._has_compatible_shallow_copy_type(dev, cpu)
    assert torch._has_compatible_shallow_copy_type(dev, torch.ones(4, dtype=torch.half, device=DEV))
    # Only dense tensors: a sparse CPU tensor cannot take a dense one's impl.
    assert not torch._has_compatible_shallow_copy_type(cpu.to_sparse(), dev)
    assert not torch._has_compatible_shallow_copy_type(dev, torch.ones(4, device="meta"))


def test_to_rbln_keeps_parameters_and_ties():
    model = TiedLM()
    params = dict(model.named_parameters())
    embed_weight = model.embed.weight
    model.to(DEV)
    assert model.head.weight is model.embed.weight is embed_weight
    assert dict(model.named_parameters()) == params  # same objects
    assert embed_weight.device == torch.device(DEV)
    assert isinstance(embed_weight, torch.nn.Parameter) and embed_weight.requires_grad
    assert storage_ptr(model.head.weight) == storage_ptr(model.embed.weight)
    assert len(list(model.parameters())) == 3  # embed (= head), norm weight and bias
    model.to("cpu")
    assert model.head.weight is model.embed.weight is embed_weight
    assert embed_weight.device == torch.device("cpu")


@pytest.mark.parametrize("convert", [
    lambda m, dev: m.to(dev, torch.float16),
    lambda m, dev: m.half().to(dev),
    lambda m, dev: m.to(dev).to(torch.bfloat16),
    lambda m, dev: m.to(torch.bfloat16).to(dev).half(),
], ids=["to_device_dtype", "half_then_device", "device_then_bfloat16", "bf16_device_half"])
def test_dtype_and_device_combinations_keep_ties_and_buffers(convert):
    torch.manual_seed(0)
    model = TiedLM()
    reference = TiedLM()
    reference.load_state_dict(model.state_dict())
    convert(reference, "cpu")
    weight = model.embed.weight
    convert(model, DEV)
    dtype = model.embed.weight.dtype
    assert dtype in (torch.float16, torch.bfloat16)
    assert model.head.weight is model.embed.weight is weight
    assert storage_ptr(model.head.weight) == storage_ptr(model.embed.weight)
    # Float buffers follow the dtype, integer ones keep theirs; all move.
    assert model.scale.device == model.steps.device == torch.device(DEV)
    assert model.scale.dtype == dtype and model.steps.dtype == torch.int64
    want = reference.state_dict()
    for name, value in model.state_dict().items():
        assert value.dtype == want[name].dtype and torch.equal(value.cpu(), want[name]), name
    model.float().cpu()
    assert model.head.weight is model.embed.weight is weight
    assert weight.device.type == "cpu" and weight.dtype == torch.float32


def test_grads_move_with_their_parameters():
    model = TiedLM()
    model(torch.tensor([[1, 2, 3]])).sum().backward()
    grad = model.embed.weight.grad
    expected = grad.clone()
    model.to(DEV)
    assert model.embed.weight.grad is grad and grad.device == torch.device(DEV)
    assert torch.equal(grad.cpu(), expected)


def test_optimizer_built_before_the_move_trains_the_device_model():
    # spec: B4 -- as on CUDA, an optimizer made before .to() holds the
    # module's parameters, which now live on the device; a step updates
    # them, the tied weight once, like the CPU.
    torch.manual_seed(0)
    cpu_model = TiedLM().half()
    dev_model = TiedLM().half()
    dev_model.load_state_dict(cpu_model.state_dict())
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.5)
    dev_opt = torch.optim.SGD(dev_model.parameters(), lr=0.5)
    dev_model.to(DEV)
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    for model, opt, x in ((cpu_model, cpu_opt, ids), (dev_model, dev_opt, ids.to(DEV))):
        opt.zero_grad()
        model(x).float().square().mean().backward()
        opt.step()
    assert dev_model.embed.weight.device == torch.device(DEV)
    for (name, a), b in zip(cpu_model.named_parameters(), dev_model.parameters()):
        torch.testing.assert_close(b.cpu(), a, atol=2e-3, rtol=2e-3, msg=name)
    assert dev_model.head.weight is dev_model.embed.weight


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
