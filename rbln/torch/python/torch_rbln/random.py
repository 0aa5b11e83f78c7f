"""RNG state of the rbln devices, shaped like torch.cuda.random.

Each logical device has a default generator (`torch.rbln.default_generators`);
random ops on rbln tensors (`torch.rand(device="rbln")`, dropout, `normal_`,
...) draw from it unless they are given a generator. Random ops run on the
host, so the generators use the CPU's algorithm: a state is the CPU
generator's ByteTensor and a seed gives the numbers a CPU generator with that
seed gives. Nothing here commits the device mapping (SPEC A6).
"""

from collections.abc import Iterable

import torch

from . import _C

__all__ = [
    "get_rng_state",
    "get_rng_state_all",
    "set_rng_state",
    "set_rng_state_all",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "initial_seed",
]


def _index(device) -> int:
    from .rbln import _checked_index

    if isinstance(device, str):
        device = torch.device(device)
    return _checked_index(device)


def _default_generator(device="rbln") -> torch.Generator:
    return _C._default_generator(_index(device))


def _device_count() -> int:
    from .rbln import is_available, device_count

    return device_count() if is_available() else 0


def get_rng_state(device="rbln") -> torch.Tensor:
    """The RNG state of a device (default: the current one) as a ByteTensor."""
    return _default_generator(device).get_state()


def get_rng_state_all() -> list:
    """The RNG states of all devices."""
    return [get_rng_state(i) for i in range(_device_count())]


def set_rng_state(new_state: torch.Tensor, device="rbln") -> None:
    """Sets the RNG state of a device (default: the current one)."""
    with torch._C._DisableFuncTorch():
        new_state = new_state.clone(memory_format=torch.contiguous_format)
    _default_generator(device).set_state(new_state)


def set_rng_state_all(new_states: Iterable) -> None:
    """Sets the RNG state of each device, in device order."""
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def manual_seed(seed: int) -> None:
    """Seeds the current device's generator."""
    if _device_count():
        _default_generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seeds every device's generator (torch.manual_seed calls this)."""
    seed = int(seed)
    for i in range(_device_count()):
        _C._default_generator(i).manual_seed(seed)


def seed() -> None:
    """Seeds the current device's generator with a non-deterministic number."""
    if _device_count():
        _default_generator().seed()


def seed_all() -> None:
    """Seeds every device's generator with one non-deterministic number."""
    count = _device_count()
    if count == 0:
        return
    first = _C._default_generator(0)
    first.seed()
    for i in range(1, count):
        _C._default_generator(i).manual_seed(first.initial_seed())


def initial_seed() -> int:
    """The initial seed of the current device's generator."""
    return _default_generator().initial_seed()
