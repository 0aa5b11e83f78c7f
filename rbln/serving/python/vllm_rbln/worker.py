"""`RblnWorker`: one vLLM worker process driving one logical rbln device.

vLLM internals used here: vllm.v1.worker.gpu_worker.Worker (init, memory
profiling and warm-up hooks) and init_worker_distributed_environment.
"""

import contextlib
import logging

import torch
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment
from vllm.v1.worker.worker_base import CompilationTimes

from .model_runner import RblnModelRunner

logger = logging.getLogger("vllm.rbln")


class RblnWorker(Worker):
    def init_device(self):
        # The runner's bookkeeping (token ids, positions, block tables, slot
        # mappings) lives on the host; the model and its KV cache on rbln.
        self.device = torch.device("cpu")
        self.rbln_device = torch.device("rbln", self.local_rank)
        torch.rbln.set_device(self.rbln_device)
        init_worker_distributed_environment(
            self.vllm_config, self.rank, self.distributed_init_method, self.local_rank,
            "gloo")
        set_random_seed(self.model_config.seed)
        self.model_runner = RblnModelRunner(self.vllm_config, self.device, self.rbln_device)

    def _maybe_get_memory_pool_context(self, tag: str):
        return contextlib.nullcontext()  # No CuMem pools: rbln has its own allocator.

    def rbln_stats(self) -> dict:
        """The step calls' compiles and CPU fallbacks (step_stats.py); for
        LLM.collective_rpc("rbln_stats")."""
        return self.model_runner.stats.snapshot()

    def sleep(self, level: int = 1) -> None:
        logger.warning("rbln: sleep mode is not supported; ignored")

    def wake_up(self, tags=None) -> None:
        logger.warning("rbln: sleep mode is not supported; ignored")

    @torch.inference_mode()
    def determine_available_memory(self) -> int:
        """Device bytes for the KV cache: --kv-cache-memory-bytes if given,
        else gpu_memory_utilization of the device minus what the weights and
        the step programs' workspace take."""
        return self.model_runner.kv_cache_budget()

    def compile_or_warm_up_model(self) -> CompilationTimes:
        self.model_runner.warm_up()
        set_random_seed(self.model_config.seed)
        return CompilationTimes(language_model=self.model_runner.compile_seconds, encoder=0.0)
