"""Repository rules that find third-party code already on this machine.

Nothing is downloaded: LLVM/MLIR come from Debian's llvm-N-dev/libmlir-N-dev,
Python headers and torch from the python3 on PATH (the pinned torch wheel).
"""

# One LLVM/MLIR per Debian release: 12 (bookworm) builds with 16, 13 (trixie)
# with 19. Debian 12's archive also carries LLVM 19, so the version is picked
# by release, never by what happens to be installed; RBLN_LLVM_VERSION
# overrides it (scripts/versions.sh pins the same choice).
_LLVM_FOR_DEBIAN = {"12": "16", "13": "19"}
_SUPPORTED_LLVM = ["16", "19"]

def _fail_missing(what, fix):
    fail("torch-rbln: %s not found on this machine; %s (scripts/setup installs it)." % (what, fix))

def _llvm_version(rctx):
    wanted = rctx.os.environ.get("RBLN_LLVM_VERSION", "")
    if wanted:
        if wanted not in _SUPPORTED_LLVM:
            fail("torch-rbln: RBLN_LLVM_VERSION=%s is not supported; use one of %s." % (wanted, ", ".join(_SUPPORTED_LLVM)))
        return wanted
    release = "12"
    debian = rctx.path("/etc/debian_version")
    if debian.exists:
        release = rctx.read(debian).strip().split(".")[0]
    return _LLVM_FOR_DEBIAN.get(release, "19")

def _mlir_prefix(rctx, version, llvm_prefix):
    """Where libMLIR.so and MLIR's headers for `version` are.

    RBLN_MLIR_PREFIX wins; then the system's (Debian 13 for 19, Debian 12 for
    16); then, for 19 on Debian 12, where scripts/setup unpacks libmlir-19 and
    libmlir-19-dev (apt cannot install them next to libmlir-16).
    """
    override = rctx.os.environ.get("RBLN_MLIR_PREFIX", "")
    if override:
        prefix = rctx.path(override)
        if not prefix.get_child("lib").get_child("libMLIR.so").exists:
            fail("torch-rbln: RBLN_MLIR_PREFIX=%s has no lib/libMLIR.so; point it at an MLIR %s install (the directory with lib/ and include/mlir)." % (override, version))
        return prefix
    if llvm_prefix.get_child("lib").get_child("libMLIR.so").exists:
        return llvm_prefix
    home = rctx.os.environ.get("HOME", "")
    private = rctx.path("%s/.cache/torch-rbln/mlir-%s/usr/lib/llvm-%s" % (home, version, version))
    if private.get_child("lib").get_child("libMLIR.so").exists:
        return private
    _fail_missing(
        "libMLIR.so for LLVM %s (looked in %s/lib and %s/lib)" % (version, llvm_prefix, private),
        "install libmlir-%s-dev, mlir-%s-tools and llvm-%s-dev, or on Debian 12 run scripts/setup, which unpacks MLIR 19 privately" % (version, version, version),
    )

def _local_llvm_impl(rctx):
    version = _llvm_version(rctx)
    llvm_prefix = rctx.path("/usr/lib/llvm-%s" % version)
    if not llvm_prefix.get_child("lib").get_child("libLLVM-%s.so" % version).exists:
        _fail_missing("libLLVM-%s.so" % version, "install llvm-%s-dev" % version)
    mlir_prefix = _mlir_prefix(rctx, version, llvm_prefix)

    # Debian's include dirs are partly symlinks; link their real targets so
    # that glob() sees the headers.
    for prefix, subs in [(llvm_prefix, ["llvm", "llvm-c"]), (mlir_prefix, ["mlir", "mlir-c"])]:
        for sub in subs:
            src = prefix.get_child("include").get_child(sub)
            if not src.exists:
                _fail_missing("%s/include/%s" % (prefix, sub), "install the LLVM/MLIR %s development packages" % version)
            rctx.symlink(src.realpath, "include/" + sub)
    rctx.symlink(mlir_prefix.get_child("lib").get_child("libMLIR.so").realpath, "lib/libMLIR.so")
    rctx.symlink(llvm_prefix.get_child("lib").get_child("libLLVM-%s.so" % version).realpath, "lib/libLLVM-%s.so" % version)
    for lib in ["libmlir_c_runner_utils.so", "libmlir_runner_utils.so"]:
        rctx.symlink(mlir_prefix.get_child("lib").get_child(lib).realpath, "lib/" + lib)

    # The MLIR prefix comes first in the run path, so that a binary loads the
    # libMLIR.so it was built against, never another one on the system.
    rpaths = [str(mlir_prefix.get_child("lib"))]
    if str(llvm_prefix) != str(mlir_prefix):
        rpaths.append(str(llvm_prefix.get_child("lib")))
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

# LLVM {version} from {llvm_prefix}, MLIR {version} from {mlir_prefix}.
cc_library(
    name = "mlir",
    srcs = ["lib/libMLIR.so", "lib/libLLVM-{version}.so"],
    hdrs = glob(["include/**/*.h", "include/**/*.inc", "include/**/*.def", "include/**/*.td"]),
    includes = ["include"],
    defines = ["RBLN_MLIR_VERSION={version}"],
    linkopts = [{linkopts}],
)

filegroup(
    name = "runner_utils",
    srcs = ["lib/libmlir_c_runner_utils.so", "lib/libmlir_runner_utils.so"],
)
""".format(
        version = version,
        llvm_prefix = str(llvm_prefix),
        mlir_prefix = str(mlir_prefix),
        linkopts = ", ".join(['"-Wl,-rpath,%s"' % p for p in rpaths]),
    ))

local_llvm = repository_rule(
    implementation = _local_llvm_impl,
    environ = ["RBLN_LLVM_VERSION", "RBLN_MLIR_PREFIX", "HOME"],
    local = True,
)

def _python_query(rctx, code):
    python = rctx.which("python3")
    if python == None:
        _fail_missing("python3", "put python3 on PATH")
    res = rctx.execute([python, "-c", code])
    if res.return_code != 0:
        return None
    return res.stdout.strip()

def _local_python_impl(rctx):
    inc = _python_query(rctx, "import sysconfig; print(sysconfig.get_paths()['include'])")
    exe = _python_query(rctx, "import sys; print(sys.executable)")
    if inc == None or not rctx.path(inc).get_child("Python.h").exists:
        _fail_missing("Python.h", "install the Python development headers")
    tag = _python_query(rctx, "import sys; print('cp%d%d' % sys.version_info[:2])")
    rctx.symlink(inc, "include")
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("defs.bzl", 'PYTHON_TAG = "%s"\nPYTHON = "%s"\n' % (tag, exe))
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

# Headers of {exe}.
cc_library(
    name = "headers",
    hdrs = glob(["include/**/*.h"]),
    includes = ["include"],
)
""".format(exe = exe))

local_python = repository_rule(
    implementation = _local_python_impl,
    local = True,
    environ = ["PATH"],
)

def _local_torch_impl(rctx):
    out = _python_query(rctx, "import os, torch; print(os.path.dirname(torch.__file__)); print(torch.__version__); print(int(torch.compiled_with_cxx11_abi()))")
    if out == None:
        _fail_missing("torch", "pip install torch==2.13.0")
    torch_dir, version, abi = out.split("\n")
    # torch bundles an old copy of protobuf's headers under include/google;
    # leave it out so that the system protobuf's headers are the ones found.
    for entry in rctx.path(torch_dir + "/include").readdir():
        if entry.basename != "google":
            rctx.symlink(entry, "include/" + entry.basename)
    rctx.symlink(torch_dir + "/lib", "lib")
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

# torch {version} from {torch_dir} (compiled_with_cxx11_abi={abi}).
# pybind11 is the copy bundled in torch's headers, to stay ABI-compatible.
cc_library(
    name = "torch",
    srcs = [
        "lib/libc10.so",
        "lib/libtorch.so",
        "lib/libtorch_cpu.so",
    ],
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh", "include/**/*.inc"]),
    includes = ["include", "include/torch/csrc/api/include"],
    defines = ["_GLIBCXX_USE_CXX11_ABI={abi}", "TORCH_API_INCLUDE_EXTENSION_H"],
    deps = ["@local_python//:headers"],
)

# torch's Python bindings (THP*), for code that needs them; the Python
# process has already loaded these when an extension is imported.
cc_library(
    name = "torch_python",
    srcs = ["lib/libtorch_python.so", "lib/libshm.so"],
    deps = [":torch"],
)
""".format(version = version, torch_dir = torch_dir, abi = abi))

local_torch = repository_rule(
    implementation = _local_torch_impl,
    local = True,
    environ = ["PATH", "PYTHONPATH"],
)
