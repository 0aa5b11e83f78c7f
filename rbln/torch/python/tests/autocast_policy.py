"""CUDA's autocast policy, read from the installed ATen/autocast_mode.h: the
op lists AutocastCUDA registers (and torch_rbln registers for rbln)."""

import os
import re

import torch


def policy_lists():
    """{policy: [(op, overload or None)]} for the policies lower_precision_fp,
    fp32, fp32_set_opt_dtype, fp32_append_dtype and promote."""
    header = os.path.join(os.path.dirname(torch.__file__), "include", "ATen", "autocast_mode.h")
    with open(header) as f:
        text = f.read()
    out = {}
    for macro, policy in [
        ("AT_FORALL_LOWER_PRECISION_FP", "lower_precision_fp"),
        ("AT_FORALL_FP32", "fp32"),
        ("AT_FORALL_FP32_SET_OPT_DTYPE", "fp32_set_opt_dtype"),
        ("AT_FORALL_PROMOTE", "promote"),
    ]:
        body = re.search(rf"#define {macro}\(_\)(.*?)\n\n", text, re.S).group(1)
        out[policy] = [(m.group(1), m.group(2)) for m in re.finditer(r"_\((\w+)(?:,\s*(\w+))?\)", body)]
    body = re.search(r"#define AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE\(_\)(.*?)\n\n", text, re.S).group(1)
    out["fp32_append_dtype"] = [tuple(m.group(1).split(".")) for m in re.finditer(r'"(\w+\.\w+)"', body)]
    return out


def policy_by_op():
    """{op name: policy} (overloads folded: each op has one policy)."""
    return {op: policy for policy, ops in policy_lists().items() for op, _ in ops}


def expected_dtype(policy, autocast_dtype, input_dtypes):
    """The output dtype CUDA's policy gives an op with these floating inputs."""
    if policy == "lower_precision_fp":
        return autocast_dtype
    if policy == "promote":
        return torch.float32 if torch.float32 in input_dtypes else autocast_dtype
    return torch.float32
