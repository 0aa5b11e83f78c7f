"""Nested compile regions (torch.compiler.nested_compile_region,
torch.rbln.mark_repeated_layers): aot_autograd traces a repeated layer once
and calls it through invoke_subgraph; the rbln backend inlines the calls
(torch_rbln/_dynamo/nested_regions.py) and compiles one flat graph. The
results equal the CPU's, inputs a region mutates (a KV cache) are updated,
gradients flow, and a region the pass cannot inline is an error naming it."""
# spec: J1, J7

import copy
import io
import os
import sys

# A graph the backend cannot compile raises instead of running on the CPU.
os.environ.setdefault("TORCH_RBLN_DISABLE_FALLBACK", "compile_error")

import pytest  # noqa: E402
import torch  # noqa: E402
from torch._dynamo.backends.common import aot_autograd  # noqa: E402

from torch_rbln._dynamo import nested_regions  # noqa: E402

DEV = "rbln"
LAYERS = 4


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Block(torch.nn.Module):
    def __init__(self, width):
        super().__init__()
        self.up = torch.nn.Linear(width, 2 * width)
        self.down = torch.nn.Linear(2 * width, width)

    def forward(self, x, scale):
        return x + self.down(torch.nn.functional.gelu(self.up(x))) * scale


class Stack(torch.nn.Module):
    def __init__(self, width=16, layers=LAYERS):
        super().__init__()
        self.layers = torch.nn.ModuleList(Block(width) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x, 0.5)
        return x


class CachedBlock(torch.nn.Module):
    """Writes its rows into its own cache (index_copy_, a KV cache's update)
    and reads the whole cache back."""

    def __init__(self, width):
        super().__init__()
        self.proj = torch.nn.Linear(width, width)

    def forward(self, x, cache, rows):
        cache.index_copy_(0, rows, self.proj(x))
        return x + cache.sum(0, keepdim=True)


class CachedStack(torch.nn.Module):
    def __init__(self, width=8, layers=LAYERS):
        super().__init__()
        self.layers = torch.nn.ModuleList(CachedBlock(width) for _ in range(layers))

    def forward(self, x, caches, rows):
        for layer, cache in zip(self.layers, caches):
            x = layer(x, cache, rows)
        return x


def _inlining_backend(seen):
    """aot_autograd on the CPU whose compilers inline the regions and run
    the flat graph: the pass alone, checked against eager."""

    def compile_graph(gm, _inputs):
        seen.append(nested_regions.inline_nested_regions(gm))
        assert not any(nested_regions._region_call(n) for n in gm.graph.nodes)
        return gm.forward

    return aot_autograd(fw_compiler=compile_graph, bw_compiler=compile_graph,
                        keep_inference_input_mutations=True)


def test_mark_repeated_layers_marks_instances_not_the_class():
    model = Stack()
    assert torch.rbln.mark_repeated_layers(model) == LAYERS
    assert torch.rbln.mark_repeated_layers(model) == 0  # already marked
    assert all(isinstance(layer, Block) and type(layer) is not Block for layer in model.layers)
    assert type(Stack().layers[0]) is Block  # other instances: as they were


def test_copies_and_saved_models_are_unmarked_layers_of_the_same_weights():
    model = Stack()
    torch.rbln.mark_repeated_layers(model)
    saved = io.BytesIO()
    torch.save(model, saved)
    saved.seek(0)
    for copy_ in (copy.deepcopy(model), torch.load(saved, weights_only=False)):
        assert all(type(layer) is Block for layer in copy_.layers)
        x = torch.randn(2, 16)
        torch.testing.assert_close(copy_(x), model(x))


def test_pass_inlines_pure_and_mutating_regions_on_cpu():
    torch.manual_seed(0)
    seen = []
    model = Stack()
    x = torch.randn(3, 16)
    want = model(x)
    torch.rbln.mark_repeated_layers(model)
    got = torch.compile(model, backend=_inlining_backend(seen), fullgraph=True)(x)
    torch.testing.assert_close(got, want)
    # Dynamo inlines a region traced for one call only (the first layer's
    # input is a graph input, the others' are not): LAYERS - 1 or LAYERS.
    assert len(seen) == 1 and LAYERS - 1 <= seen[0] <= LAYERS, seen

    seen.clear()
    torch._dynamo.reset()
    cached = CachedStack()
    caches = [torch.randn(6, 8) for _ in range(LAYERS)]
    want_caches = [c.clone() for c in caches]
    rows, x = torch.tensor([1, 4]), torch.randn(2, 8)
    with torch.inference_mode():
        want = cached(x, want_caches, rows)
        torch.rbln.mark_repeated_layers(cached)
        got = torch.compile(cached, backend=_inlining_backend(seen), fullgraph=True)(
            x, caches, rows)
    torch.testing.assert_close(got, want)
    for c, w in zip(caches, want_caches):
        torch.testing.assert_close(c, w)
    assert len(seen) == 1 and LAYERS - 1 <= seen[0] <= LAYERS, seen


def test_rbln_regions_equal_cpu_and_compile_one_program():
    torch.manual_seed(0)
    model = Stack()
    x = torch.randn(3, 16)
    want = model(x)
    dev = Stack().to(DEV)
    dev.load_state_dict(model.state_dict())
    torch.rbln.mark_repeated_layers(dev)
    got = torch.compile(dev, backend="rbln", fullgraph=True)(x.to(DEV))
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
    graph = torch.rbln.compiled_programs()[-1]
    assert LAYERS - 1 <= graph.inlined_regions <= LAYERS


def test_rbln_region_updates_its_kv_cache():
    torch.manual_seed(0)
    model = CachedStack()
    dev = CachedStack().to(DEV)
    dev.load_state_dict(model.state_dict())
    torch.rbln.mark_repeated_layers(dev)
    step = torch.compile(dev, backend="rbln", fullgraph=True)
    caches = [torch.randn(6, 8) for _ in range(LAYERS)]
    dev_caches = [c.to(DEV) for c in caches]
    with torch.inference_mode():
        for rows in ([0, 3], [5, 2]):
            rows = torch.tensor(rows)
            x = torch.randn(2, 8)
            want = model(x, caches, rows)
            got = step(x.to(DEV), dev_caches, rows.to(DEV))
            torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
            for c, d in zip(caches, dev_caches):
                torch.testing.assert_close(d.cpu(), c, rtol=1e-4, atol=1e-4)
    assert LAYERS - 1 <= torch.rbln.compiled_programs()[-1].inlined_regions <= LAYERS


def test_rbln_training_through_regions_matches_cpu_gradients():
    torch.manual_seed(0)
    model = Stack()
    dev = Stack().to(DEV)
    dev.load_state_dict(model.state_dict())
    torch.rbln.mark_repeated_layers(dev)
    x = torch.randn(3, 16)
    model(x).square().sum().backward()
    torch.compile(dev, backend="rbln", fullgraph=True)(x.to(DEV)).square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), dev.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-4, atol=1e-4, msg=name)


class KwBlock(torch.nn.Module):
    """Called the way transformers calls a decoder layer: keyword arguments,
    a tuple of tensors (the RoPE cos/sin), None, a bool, and sometimes an
    object (a KV cache)."""

    def __init__(self, width):
        super().__init__()
        self.proj = torch.nn.Linear(width, width)

    def forward(self, x, mask=None, position_embeddings=None, use_cache=False, state=None):
        cos, sin = position_embeddings
        y = self.proj(x * cos + x.flip(-1) * sin)
        if mask is not None:
            y = y + mask
        if state is not None:
            y = y * state.scale
        return x + (y if not use_cache else 2 * y)


class KwStack(torch.nn.Module):
    def __init__(self, width=8, layers=LAYERS):
        super().__init__()
        self.layers = torch.nn.ModuleList(KwBlock(width) for _ in range(layers))

    def forward(self, x, state=None):
        rope = (x.cos(), x.sin())
        for layer in self.layers:
            x = layer(x, mask=None, position_embeddings=rope, use_cache=False, state=state)
        return x


class Scale:
    scale = 0.5


def test_a_call_of_leaves_reaches_the_region_flat_and_round_trips():
    t, u = torch.ones(1), torch.zeros(1)
    flat = nested_regions._flatten_call((t, [u, 3]), {"mask": None, "rope": (t, u), "on": True})
    assert flat == ["-,-+2,mask,rope*2,on", t, u, 3, None, t, u, True]
    args, kwargs = nested_regions._unflatten_call(flat[0], flat[1:])
    assert args == [t, [u, 3]] and kwargs == {"mask": None, "rope": (t, u), "on": True}
    assert nested_regions._unflatten_call("", []) == ([], {})
    # An object (a KV cache), also inside a tuple: the call is not flattened.
    assert nested_regions._flatten_call((t,), {"cache": Scale()}) is None
    assert nested_regions._flatten_call(((t, Scale()),), {}) is None
    # A keyword no identifier names (passed as **{...}): not flattened.
    assert nested_regions._flatten_call((t,), {"a,b": t}) is None


def test_rbln_regions_called_with_keywords_skip_dynamos_pytree_fingerprint(monkeypatch):
    """Dynamo traces a pytree flatten of a region's inputs at every call
    unless they are flat leaves without keywords; the marked forward passes
    them flat, and the results equal the CPU's. A call with an object falls
    back to the plain marked region, still right."""
    from torch._dynamo.variables import invoke_subgraph

    pytree_calls = []
    original = invoke_subgraph.build_fingerprint_with_pytree

    def counting(*args, **kwargs):
        pytree_calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(invoke_subgraph, "build_fingerprint_with_pytree", counting)
    torch.manual_seed(0)
    model = KwStack()
    x = torch.randn(3, 8)
    dev = KwStack().to(DEV)
    dev.load_state_dict(model.state_dict())
    torch.rbln.mark_repeated_layers(dev)
    step = torch.compile(dev, backend="rbln", fullgraph=True)
    torch.testing.assert_close(step(x.to(DEV)).cpu(), model(x), rtol=1e-4, atol=1e-4)
    assert LAYERS - 1 <= torch.rbln.compiled_programs()[-1].inlined_regions <= LAYERS
    assert not pytree_calls
    # Eager calls of a marked layer run its own forward.
    torch.testing.assert_close(dev(x.to(DEV)).cpu(), model(x), rtol=1e-4, atol=1e-4)

    torch.testing.assert_close(step(x.to(DEV), Scale()).cpu(), model(x, Scale()),
                               rtol=1e-4, atol=1e-4)
    assert pytree_calls


def _tiny_llama_config():
    import transformers

    return transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, vocab_size=64)


def test_a_static_cache_reaches_the_region_as_its_layers_tensors():
    """A transformers StaticCache is flattened to layer `layer_idx`'s
    tensors; the region's stand-in is that StaticLayer (the same attributes)
    and its update writes what the cache's own update writes."""
    import transformers

    from torch_rbln._dynamo import static_cache

    config = _tiny_llama_config()
    static_cache.find_cache_types()  # as mark_repeated_layers does
    cache, want = (transformers.StaticCache(config=config, max_cache_len=8) for _ in range(2))
    t = torch.ones(1)
    # Not initialized yet (lazily, by its first update): passed as it is.
    assert nested_regions._flatten_call((t,), {"cache": cache}, 1) is None
    for c in (cache, want):
        c.early_initialization(batch_size=1, num_heads=2, head_dim=8, dtype=torch.float32,
                               device=torch.device("cpu"))
    assert nested_regions._flatten_call((t,), {"cache": cache}, None) is None
    real = cache.layers[1]
    flat = nested_regions._flatten_call((t,), {"cache": cache, "on": True}, 1)
    assert flat[0] == "-,cache@,on"
    assert all(x is y for x, y in zip(flat[2:], (real.cumulative_length, real.keys, real.values)))
    args, kwargs = nested_regions._unflatten_call(flat[0], flat[1:])
    standin = kwargs["cache"]
    assert args == [t] and kwargs["on"] is True and type(standin.layer) is type(real)
    assert vars(standin.layer).keys() == vars(real).keys()
    for name, value in vars(real).items():
        assert getattr(standin.layer, name) is value or getattr(standin.layer, name) == value
    k, v = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    for _ in range(2):  # the second call appends at the cumulative length
        got = standin.update(k, v, 5)
        ref = want.update(k, v, 1)
        assert got[0] is real.keys and got[1] is real.values
        torch.testing.assert_close(got, ref, rtol=0, atol=0)
    assert standin.get_seq_length() == want.get_seq_length(1) == 6
    assert not cache.layers[0].keys.any()  # other layers untouched
    with pytest.raises(AttributeError, match="cache.layers.*without mark_repeated_layers"):
        standin.layers  # another layer's state: not in a region's cache
    # A layer's index: the one its modules agree on.
    layer = transformers.models.llama.modeling_llama.LlamaDecoderLayer(config, 1)
    assert static_cache.layer_index(layer) == 1
    assert static_cache.layer_index(Block(4)) is None


def test_rbln_marked_layers_writing_a_kv_cache_with_gradients_on():
    """PyTorch's invoke_subgraph cannot differentiate a region that writes
    its inputs: with gradients on, a marked layer given a KV cache is traced
    inline instead (no error), with the logits of the inference-mode run."""
    import transformers

    config = _tiny_llama_config()
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(DEV)
    torch.rbln.mark_repeated_layers(model)
    ids = torch.randint(0, 64, (1, 6)).to(DEV)
    step = torch.compile(model, backend="rbln", fullgraph=True)
    logits = []
    for grad in (True, False):
        cache = transformers.StaticCache(config=config, max_cache_len=8)
        cache.early_initialization(batch_size=1, num_heads=2, head_dim=8, dtype=torch.float32,
                                   device=torch.device(DEV))
        with torch.set_grad_enabled(grad):
            logits.append(step(input_ids=ids, cache=cache, use_cache=True).logits.cpu())
    torch.testing.assert_close(logits[0].detach(), logits[1], rtol=1e-4, atol=1e-4)


class ViewWriter(torch.nn.Module):
    def forward(self, x, buf):
        buf[:, :2].add_(x)
        return x * 2


def test_a_region_writing_a_view_of_an_input_is_right_or_an_error_naming_it():
    model = torch.nn.ModuleList([ViewWriter(), ViewWriter()])

    def run(x, buf):
        for layer in model:
            x = layer(x, buf)
        return x

    torch.rbln.mark_repeated_layers(torch.nn.Sequential(model))
    buf = torch.zeros(3, 4, device=DEV)
    x = torch.ones(3, 2, device=DEV)
    with torch.inference_mode():
        try:
            out = torch.compile(run, backend="rbln", fullgraph=True)(x, buf)
        except Exception as e:  # noqa: BLE001 -- the message is what is tested
            assert "nested compile region" in str(e) and "mark_repeated_layers" in str(e), e
            return
    # aot_autograd may also give the view's write as a whole-base update,
    # which the pass inlines: then the results must be right.
    torch.testing.assert_close(out.cpu(), torch.full((3, 2), 4.0))
    torch.testing.assert_close(buf.cpu()[:, :2], torch.full((3, 2), 3.0))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
