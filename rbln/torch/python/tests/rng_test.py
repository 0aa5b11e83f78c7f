"""RNG state of the rbln devices: torch.rbln.get_rng_state/set_rng_state
(and _all), seed, seed_all, initial_seed, manual_seed, default_generators,
torch.Generator("rbln"), and replaying an RNG-using step from a saved state."""
# spec: none -- torch.cuda parity (issue 18); SPEC has no RNG items.

import sys

import pytest
import torch



def _random_step(x):
    """Every random op family an rbln model or script uses, on the device."""
    return [
        torch.rand(4, device="rbln"),
        torch.randn(4, device="rbln"),
        torch.randint(0, 100, (4,), device="rbln"),
        torch.randperm(6, device="rbln"),
        torch.nn.functional.dropout(x, 0.5),
        torch.empty(4, device="rbln").normal_(2.0, 3.0),
        torch.empty(4, device="rbln").uniform_(-1.0, 1.0),
        torch.bernoulli(torch.full((8,), 0.5, device="rbln")),
        torch.multinomial(torch.ones(5, device="rbln"), 3),
    ]


def _cpu(tensors):
    return [t.cpu() for t in tensors]


def test_state_round_trip_replays_every_random_op():
    x = torch.ones(64, device="rbln")
    state = torch.rbln.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    assert state.shape == torch.get_rng_state().shape  # The CPU algorithm's state.
    first = _cpu(_random_step(x))
    assert not torch.equal(torch.rbln.get_rng_state(), state)  # The draws advanced it.
    torch.rbln.set_rng_state(state)
    second = _cpu(_random_step(x))
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    # A different state gives different numbers.
    third = _cpu(_random_step(x))
    assert not torch.equal(first[0], third[0])


def test_rbln_draws_leave_the_cpu_generator_alone():
    torch.manual_seed(7)
    expected_cpu = torch.rand(5)
    torch.manual_seed(7)
    on_device = torch.rand(5, device="rbln").cpu()
    torch.nn.functional.dropout(torch.ones(32, device="rbln"), 0.3)
    assert torch.equal(torch.rand(5), expected_cpu)
    # Same seed, same algorithm: the device draws what the CPU would.
    assert torch.equal(on_device, expected_cpu)


def test_seeds():
    torch.rbln.manual_seed(123)
    assert torch.rbln.initial_seed() == 123
    a = torch.rand(3, device="rbln").cpu()
    torch.manual_seed(123)  # torch.manual_seed seeds rbln too (manual_seed_all).
    assert torch.equal(torch.rand(3, device="rbln").cpu(), a)
    torch.rbln.seed()
    assert torch.rbln.initial_seed() != 123
    torch.rbln.seed_all()
    seeded = torch.rbln.initial_seed()
    assert all(g.initial_seed() == seeded for g in torch.rbln.default_generators)
    assert len(torch.rbln.default_generators) == torch.rbln.device_count()
    assert torch.rbln.default_generators[0].device == torch.device("rbln:0")


def test_explicit_generator_is_independent_of_the_default():
    g = torch.Generator(device="rbln")
    assert g.device.type == "rbln"
    g.manual_seed(5)
    default_state = torch.rbln.get_rng_state()
    a = torch.rand(4, device="rbln", generator=g).cpu()
    b = torch.empty(4, device="rbln").normal_(generator=g).cpu()
    assert torch.equal(torch.rbln.get_rng_state(), default_state)
    g.manual_seed(5)
    assert torch.equal(torch.rand(4, device="rbln", generator=g).cpu(), a)
    saved = g.get_state()
    c = torch.empty(4, device="rbln").normal_(generator=g).cpu()
    g.set_state(saved)
    assert torch.equal(torch.empty(4, device="rbln").normal_(generator=g).cpu(), c)
    cpu_gen = torch.Generator().manual_seed(5)
    assert torch.equal(torch.rand(4, generator=cpu_gen), a)
    assert torch.equal(b, c)  # Reseeded: the same sequence again.


def test_checkpoint_restore_replays_a_training_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 64), torch.nn.Dropout(0.25), torch.nn.ReLU(), torch.nn.Linear(64, 64)
    ).to("rbln")
    x = torch.randn(8, 64).to("rbln")
    checkpoint = {
        "model": {k: v.cpu().clone() for k, v in model.state_dict().items()},
        "rbln_rng": torch.rbln.get_rng_state_all(),
    }

    def step():
        model.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        return loss.item(), [p.grad.cpu() for p in model.parameters()]

    loss1, grads1 = step()
    loss_other, _ = step()  # New dropout masks: a different loss.
    assert loss_other != loss1
    model.load_state_dict(checkpoint["model"])
    torch.rbln.set_rng_state_all(checkpoint["rbln_rng"])
    loss2, grads2 = step()
    assert loss2 == loss1
    for g1, g2 in zip(grads1, grads2):
        assert torch.equal(g1, g2)


# Per-device states (two ATOM NPUs) are checked in a fresh process by
# cuda_parity_test.py's test_in_a_fresh_process.


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
