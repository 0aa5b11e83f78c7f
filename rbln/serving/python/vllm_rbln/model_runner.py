"""`RblnModelRunner`: vLLM's model runner with the model step on rbln.

vLLM's runner (the CPU runner's host-buffer variant of GPUModelRunner) keeps
the per-step bookkeeping -- token ids, positions, block tables, slot mappings
-- in host memory. This runner keeps the model weights and each layer's paged
KV cache in rbln memory and replaces the forward pass (`_model_forward`, the
override point vLLM documents): each scheduler step is one call of a
bucketed static shape (buckets.py: every new token of the step in one padded
row of tokens); the call uploads its padded host arrays, runs the step --
the vLLM model, its paged attention and the logits of each request's last
token -- as one program compiled by torch.compile(backend="rbln"), and
downloads the logits. One Dynamo capture with symbolic row counts serves the
buckets of more than one token; the backend compiles a static program per
bucket from it (its `compile_per_shape` option). Sampling stays on the host,
on those logits.

vLLM internals used here: CPUModelRunner / GPUModelRunner (load_model,
initialize_kv_cache_tensors, _model_forward, kv_caches), the forward
context, bind_kv_cache and get_layers_from_vllm_config.
"""

import logging
import time

import numpy as np
import torch
from vllm.config import get_layers_from_vllm_config
from vllm.forward_context import get_forward_context, set_forward_context
from vllm.model_executor.layers.attention import Attention
from vllm.v1.worker.cpu_model_runner import CPUModelRunner
from vllm.v1.worker.utils import bind_kv_cache

from . import moe, mxfp4, paged_attention
from .attention import RblnCallMetadata, RblnStepMetadata
from .buckets import Buckets
from .step_stats import StepStats

logger = logging.getLogger("vllm.rbln")


class RblnModelRunner(CPUModelRunner):
    def __init__(self, vllm_config, device: torch.device, rbln_device: torch.device):
        super().__init__(vllm_config, device)
        self.rbln_device = rbln_device
        scheduler = vllm_config.scheduler_config
        self.block_size = vllm_config.cache_config.block_size
        # Every token's block-table row is padded to the blocks of the
        # longest sequence, so one program serves any context length (the
        # attention kernel reads only the blocks of the token's context).
        self.table_blocks = -(-self.max_model_len // self.block_size)
        self.buckets = Buckets(scheduler.max_num_seqs, scheduler.max_num_batched_tokens)
        self.stats = StepStats()
        self.compile_seconds = 0.0
        self._caches = {}  # layer name -> rbln tensor
        self._layers = {}  # layer name -> vLLM Attention module
        self._device_model = None
        self._compiled_step = None
        self._vocab = None

    # -- model and cache -------------------------------------------------------
    def load_model(self, load_dummy_weights: bool = False) -> None:
        if self.model_config.quantization in mxfp4.QUANTIZATIONS:
            mxfp4.install()  # This process's copy of vLLM's MXFP4 config class.
        super().load_model(load_dummy_weights)  # On the host (platform: load_config.device).
        start = time.perf_counter()
        model = self.model.to(self.rbln_device)
        logger.info("rbln: model weights moved to %s in %.1f s", self.rbln_device,
                    time.perf_counter() - start)
        self._device_model = model
        moe_layers = moe.prepare_moe_layers(model)
        if moe_layers:
            logger.info("rbln: %d MoE layer(s): experts as grouped GEMMs in the step program",
                        moe_layers)
        self._vocab = self.model_config.get_vocab_size()
        # The runner samples from logits the step program computed; vLLM's
        # own compute_logits call then passes them through.
        model.compute_logits = _logits_computed_on_device
        self._layers = get_layers_from_vllm_config(self.vllm_config, Attention)
        for layer in self._layers.values():
            layer.impl.block_size = self.block_size
        torch._dynamo.config.recompile_limit = max(
            torch._dynamo.config.recompile_limit, 2 * len(self.buckets.shapes()))
        torch._dynamo.config.accumulated_recompile_limit = max(
            torch._dynamo.config.accumulated_recompile_limit, 4 * len(self.buckets.shapes()))
        step = self._device_step
        if not self.model_config.enforce_eager:
            # One capture serves the buckets: the token and logits rows are
            # symbolic sizes (_mark_rows) and the backend compiles a static
            # program per bucket from it.
            step = torch.compile(step, backend="rbln", dynamic=False, fullgraph=True,
                                 options={"compile_per_shape": True})
        self._compiled_step = step

    def _device_step(self, input_ids, positions, last_rows):
        """The program of one call: the model over a B x Q grid of tokens,
        then the logits of each request's last token."""
        model = self._device_model
        hidden = model(input_ids=input_ids, positions=positions)
        # float32 as vLLM's sampler takes them (the cast is part of the program).
        return type(model).compute_logits(model, hidden.index_select(0, last_rows)).float()

    def kv_cache_budget(self) -> int:
        """Device bytes the KV cache may take (the worker's
        determine_available_memory)."""
        explicit = self.cache_config.kv_cache_memory_bytes
        if explicit is not None:
            return int(explicit)
        free, total = torch.rbln.mem_get_info(self.rbln_device)
        used = total - free
        budget = int(total * self.cache_config.gpu_memory_utilization) - used
        if budget <= 0:
            raise ValueError(
                f"rbln: no device memory left for the KV cache on {self.rbln_device}: "
                f"{used / 2**30:.2f} GiB of {total / 2**30:.2f} GiB in use, "
                f"gpu_memory_utilization={self.cache_config.gpu_memory_utilization}; raise it "
                "or pass --kv-cache-memory-bytes")
        return budget

    def initialize_kv_cache_tensors(self, kv_cache_config, kernel_block_sizes,
                                    kv_cache_allocation_context=None):
        """One rbln tensor per layer, [2, kv heads, blocks * block_size, head
        size] (paged_attention.py), bound to its vLLM Attention layer."""
        if kernel_block_sizes and any(s != self.block_size for s in kernel_block_sizes):
            raise ValueError(f"rbln: kernel block sizes {kernel_block_sizes} differ from the "
                             f"cache block size {self.block_size}")
        caches = {}
        for tensor in kv_cache_config.kv_cache_tensors:
            num_blocks = kv_cache_config.num_blocks_of(tensor) if hasattr(
                kv_cache_config, "num_blocks_of") else kv_cache_config.num_blocks
            for name in tensor.layers:
                impl = self._layers[name].impl
                shape = paged_attention.cache_shape(num_blocks, self.block_size,
                                                    impl.num_kv_heads, impl.head_size)
                # Zeroed: the null block (0) is read by padding rows.
                caches[name] = torch.zeros(shape, dtype=self.model_config.dtype,
                                           device=self.rbln_device)
        for name, target in self.shared_kv_cache_layers.items():
            caches[name] = caches[target]
        bind_kv_cache(caches, self.compilation_config.static_forward_context, self.kv_caches)
        self._caches = caches
        logger.info("rbln: KV cache of %d layer(s), %d blocks of %d tokens, %.1f MiB on %s",
                    len(caches), num_blocks, self.block_size,
                    sum(t.numel() * t.element_size() for t in caches.values()) / 2**20,
                    self.rbln_device)
        return caches

    def _zero_block_ids(self, block_ids) -> None:
        # Stale rows of a reused block are never read: attention sees only
        # positions below each request's length, all written first.
        pass

    # -- steps -------------------------------------------------------------------
    def _model_forward(self, input_ids=None, positions=None, intermediate_tensors=None,
                       inputs_embeds=None, **model_kwargs):
        if inputs_embeds is not None or intermediate_tensors is not None:
            raise NotImplementedError("rbln: input embeddings and pipeline stages")
        context = get_forward_context()
        step = _step_metadata(context.attn_metadata)
        num_tokens = input_ids.shape[0]
        if step is None:  # A profiling run without requests.
            return torch.zeros((num_tokens, self._vocab), dtype=torch.float32)
        qsl = step.query_start_loc.numpy()[:step.num_reqs + 1]
        query_lens = np.diff(qsl)
        call = self.buckets.plan(query_lens.tolist())
        saved = context.attn_metadata, context.slot_mapping
        try:
            rows = self._run_call(context, call, qsl, input_ids.numpy(), positions.numpy(),
                                  step)
        finally:
            context.attn_metadata, context.slot_mapping = saved
        # Only the rows vLLM samples from (each request's last token) are set.
        logits = torch.empty((num_tokens, self._vocab), dtype=torch.float32)
        logits[torch.from_numpy((qsl[1:] - 1).astype(np.int64))] = rows
        self.stats.count_step(mixed=bool(query_lens.max() > 1 and query_lens.min() == 1))
        return logits

    def _run_call(self, context, call, qsl, input_ids, positions, step):
        """Uploads one call's padded token rows, runs its program, returns
        the logits rows of the step's requests (host, float32)."""
        t, num_reqs, n = call.tokens, step.num_reqs, int(qsl[-1])
        ids = np.zeros(t, np.int64)
        pos = np.zeros(t, np.int64)
        slots = np.zeros(t, np.int64)  # Padding writes the null block,
        table = np.zeros((t, self.table_blocks), np.int64)  # reads its slot 0.
        last = np.zeros(call.rows, np.int64)
        ids[:n] = input_ids[:n]
        pos[:n] = positions[:n]
        slots[:n] = step.slot_mapping.numpy()[:n]
        block_table = step.block_table.numpy()
        width = min(self.table_blocks, block_table.shape[1])
        # Each token's row is its request's block-table row.
        table[:n, :width] = np.repeat(block_table[:num_reqs, :width], np.diff(qsl), axis=0)
        last[:num_reqs] = qsl[1:] - 1
        dev = self.rbln_device
        meta = RblnCallMetadata(
            slot_mapping=torch.from_numpy(slots).to(dev),
            block_table=torch.from_numpy(table).to(dev),
            positions=torch.from_numpy(pos).to(dev))
        self._bind_call(context, meta)
        with self.stats.call(call):
            out = self._host_logits(torch.from_numpy(ids).to(dev), meta.positions,
                                    torch.from_numpy(last).to(dev))
        return out[:num_reqs]

    def _host_logits(self, ids, positions, last):
        """The step program's logits (float32) on the host; warm-up takes this
        same path."""
        _mark_rows(ids, last)
        return self._compiled_step(ids, positions, last).cpu()

    def _bind_call(self, context, meta: RblnCallMetadata) -> None:
        """Puts one call's metadata into vLLM's forward context, the same way
        for warm-up and serving: Dynamo guards on what the step reads there."""
        _mark_rows(meta)
        context.attn_metadata = {name: meta for name in self._layers}
        context.slot_mapping = {}  # The attention writes the cache itself.

    # -- warm-up -------------------------------------------------------------------
    @torch.inference_mode()
    def warm_up(self) -> None:
        """Compiles the program of every bucket shape (a call of dummy tokens
        writing only the null block), so serving never compiles."""
        start = time.perf_counter()
        dev = self.rbln_device
        for call in self.buckets.shapes():
            t = call.tokens
            # Distinct inference tensors, as in a real call (Dynamo guards on
            # aliasing and on the dispatch keys).
            def zeros(*shape):
                return torch.zeros(shape, dtype=torch.int64, device=dev)
            meta = RblnCallMetadata(
                slot_mapping=zeros(t), positions=zeros(t), block_table=zeros(t, self.table_blocks))
            with set_forward_context(None, self.vllm_config), \
                    self.stats.call(call, warm_up=True):
                self._bind_call(get_forward_context(), meta)
                self._host_logits(zeros(t), meta.positions, zeros(call.rows))
        self.compile_seconds = time.perf_counter() - start
        # The warm-up's calls uploaded the weights: their host copies (the
        # bytes .to() took from vLLM's host model) are not needed any more.
        freed = torch.rbln.release_host_copies(self._device_model)
        self.stats.host_copies_freed_bytes = freed
        logger.info("rbln: freed the host copies of the weights (%.2f GiB of host memory)",
                    freed / 2**30)
        self.stats.warmed_up()
        logger.info("rbln: warm-up compiled %d step shapes %s in %.1f s", len(
            self.buckets.shapes()), self.buckets.shapes(), self.compile_seconds)


def _mark_rows(*items):
    """Marks the rows of a call's tensors (token rows, logits rows; a
    metadata's fields) as symbolic sizes for Dynamo, so one capture serves
    every bucket. maybe_: a size of 1 stays static (Dynamo specializes it)."""
    for item in items:
        tensors = vars(item).values() if isinstance(item, RblnCallMetadata) else (item,)
        for t in tensors:
            torch._dynamo.maybe_mark_dynamic(t, 0)


def _step_metadata(attn_metadata):
    if not isinstance(attn_metadata, dict):
        return None
    for value in attn_metadata.values():
        if isinstance(value, RblnStepMetadata):
            return value
    return None


def _logits_computed_on_device(hidden_or_logits):
    """vLLM calls model.compute_logits on what _model_forward returned: the
    logits the step program computed already."""
    return hidden_or_logits
