"""A transformers StaticCache handed to a marked layer's region as tensors.

Dynamo reuses its trace of a nested compile region only for calls whose
inputs are tensors, modules and constants. A generate step calls every
decoder layer with the whole KV cache object, and each layer indexes it
with its own `layer_idx`, so Dynamo traced all of them (~0.2 s a layer at
Llama-3.2-1B's widths). A marked layer's call instead hands its region
the tensors of its own cache layer (the cumulative length, keys, values)
and the region rebuilds that layer around them: one object that answers
the calls a decoder layer makes on the cache (`update` with any layer
index goes to this layer), updating it with transformers' own
StaticLayer.update. Other caches (dynamic, sliding, offloaded, not yet
initialized) reach the region as they are."""

import sys

# The cache layer's tensors the region receives: (cumulative_length, keys,
# values), in that order -- the order in which the first layer's reach the
# graph (the model reads layer 0's length first), so that every layer's
# segment updates its inputs in the same order and compiles as one.
LAYER_TENSORS = 3


# (StaticCache, StaticLayer, Cache) once transformers is loaded and layers
# are marked (found then, not while Dynamo traces a call).
_TYPES = None


def find_cache_types():
    global _TYPES
    module = sys.modules.get("transformers.cache_utils")
    if module is not None:
        _TYPES = module.StaticCache, module.StaticLayer, module.Cache


def passes_a_cache(args, kwargs):
    """Whether a call passes a transformers KV cache (which the layer
    updates in place)."""
    if _TYPES is None:
        return False
    return any(isinstance(v, _TYPES[2]) for v in args + tuple(kwargs.values()))


def layer_index(layer):
    """The `layer_idx` the modules of a decoder layer index a cache with,
    if they agree on one (else None)."""
    found = {m.layer_idx for m in layer.modules() if isinstance(getattr(m, "layer_idx", None), int)}
    return found.pop() if len(found) == 1 else None


def layer_tensors(value, layer_idx):
    """(cumulative_length, keys, values) of `value`'s layer `layer_idx`
    when `value` is a StaticCache whose layers are all initialized
    StaticLayers (no sliding or hybrid layers), else None."""
    types = _TYPES
    if types is None or layer_idx is None or type(value) is not types[0]:
        return None
    if getattr(value, "offloading", False) or not 0 <= layer_idx < len(value.layers):
        return None
    for layer in value.layers:
        if type(layer) is not types[1] or not layer.is_initialized:
            return None
    layer = value.layers[layer_idx]
    return layer.cumulative_length, layer.keys, layer.values


def _static_layer(cumulative_length, keys, values):
    """A StaticLayer over existing tensors: the attributes its
    lazy_initialization sets, taken from the tensors."""
    cls = _TYPES[1]
    layer = cls.__new__(cls)
    layer.max_cache_len = keys.shape[2]
    layer.device = keys.device
    layer.batch_size, layer.num_heads = keys.shape[0], keys.shape[1]
    layer.k_head_dim = keys.shape[-1]
    layer.v_head_dim = values.shape[-1]
    layer.keys = keys
    layer.values = values
    layer.cumulative_length = cumulative_length
    layer.is_initialized = True
    return layer


class OneLayerCache:
    """A StaticCache as one decoder layer's region sees it: that layer's
    StaticLayer and the Cache calls a decoder layer makes on its own layer.
    The region is traced once for every layer, so the layer index those
    calls pass is not checked; what else a Cache has (`layers`, other
    layers' states) is not here: a layer that reads it fails to compile
    with an error saying so, rather than reading the wrong layer."""

    is_compileable = True

    def __init__(self, cumulative_length, keys, values):
        self.layer = _static_layer(cumulative_length, keys, values)

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        return self.layer.update(key_states, value_states, *args, **kwargs)

    def get_seq_length(self, layer_idx=0):
        return self.layer.get_seq_length()

    def get_mask_sizes(self, query_length, layer_idx=0):
        return self.layer.get_mask_sizes(query_length)

    def __getattr__(self, name):
        raise AttributeError(
            f"rbln: a layer marked by torch.rbln.mark_repeated_layers read `cache.{name}`; inside "
            "a marked layer a StaticCache is its own layer's keys and values only (update, "
            "get_seq_length, get_mask_sizes). Compile this model without "
            "mark_repeated_layers.")
