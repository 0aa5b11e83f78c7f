"""Builds the torch_rbln wheel (and its dist-info for in-tree tests).

Used by //rbln/torch:wheel and :dist_info; needs only the standard library.
"""

import argparse
import base64
import hashlib
import os
import stat
import zipfile

NAME = "torch_rbln"
# The torch the extension is compiled against; pinned in scripts/versions.sh.
TORCH_REQUIREMENT = "torch==2.13.0"


def metadata(version: str) -> str:
    return (
        "Metadata-Version: 2.1\n"
        f"Name: torch-rbln\n"
        f"Version: {version}\n"
        "Summary: PyTorch backend for RBLN NPUs (device 'rbln') with a "
        "simulated NPU, its own MLIR compiler and runtime\n"
        f"Requires-Dist: {TORCH_REQUIREMENT}\n"
        "Requires-Python: >=3.10\n"
    )


def entry_points() -> str:
    # torch imports every `torch.backends` entry point at `import torch`;
    # torch.compile(backend="rbln") looks `rbln` up in torch_dynamo_backends.
    return (
        f"[torch.backends]\n{NAME} = {NAME}:_autoload\n\n"
        f"[torch_dynamo_backends]\nrbln = {NAME}._dynamo:rbln_backend\n\n"
        f"[console_scripts]\nrbln-smi = {NAME}.smi:main\n"
    )


def write_dist_info(version: str, out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "METADATA"), "w") as f:
        f.write(metadata(version))
    with open(os.path.join(out_dir, "entry_points.txt"), "w") as f:
        f.write(entry_points())


def record_line(path: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"{path},sha256={digest.decode()},{len(data)}"


def build_wheel(version: str, tag: str, package_root: str, out: str, srcs, extras=()):
    dist_info = f"{NAME}-{version}.dist-info"
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
    if f"{NAME}/_C.so" not in files:
        raise SystemExit("build_wheel: the extension torch_rbln/_C.so is missing")
    meta = {
        f"{dist_info}/METADATA": metadata(version),
        f"{dist_info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: torch-rbln build_wheel\n"
            f"Root-Is-Purelib: false\nTag: {tag}\n"
        ),
        f"{dist_info}/entry_points.txt": entry_points(),
        f"{dist_info}/top_level.txt": f"{NAME}\n",
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
    if args.cmd == "dist-info":
        write_dist_info(args.version, args.out_dir)
    else:
        build_wheel(args.version, args.tag, args.package_root, args.out, args.srcs, args.extra)


if __name__ == "__main__":
    main()
