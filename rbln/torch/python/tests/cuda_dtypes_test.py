"""The ops CUDA runs in a dtype the CPU rejects (issue 30): the walk of
OpInfo in `torch_rbln.testing.cuda_dtypes` must give the statuses of
`docs/cuda-dtypes.md`'s table, so the doc stays true (an entry that
starts or stops running on rbln must change the table). To regenerate the table
after a change:

  RBLN_CUDA_DTYPES_UPDATE=1 bazel run //rbln/torch/python/tests:cuda_dtypes_test
"""
# spec: G1, I1, J6

import os

# Read at process start (SPEC I6): compile failures raise.
os.environ["TORCH_RBLN_DISABLE_FALLBACK"] = "compile_error"

import sys  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from torch_rbln.testing import cuda_dtypes  # noqa: E402
from torch_rbln.testing.workspace_docs import workspace_doc  # noqa: E402

DOC = "docs/cuda-dtypes.md"
_BEGIN = "<!-- BEGIN GENERATED TABLE -->"
_END = "<!-- END GENERATED TABLE -->"


def _cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


def render(results):
    lines = [_BEGIN, "| entry | dtype | status | note |", "|---|---|---|---|"]
    for r in sorted(results, key=lambda r: (r.entry, r.dtype)):
        lines.append(f"| `{r.entry}` | {r.dtype} | {r.status} | {_cell(r.note)} |")
    lines.append(_END)
    return "\n".join(lines)


def parse(text):
    """{(entry, dtype): status} of the doc's generated table."""
    body = text[text.index(_BEGIN):text.index(_END)]
    table = {}
    for line in body.splitlines()[3:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        table[(cells[0].strip("`"), cells[1])] = cells[2]
    return table


@pytest.fixture(scope="module")
def results():
    return cuda_dtypes.walk()


def test_doc_table_is_the_walk(results):
    path = workspace_doc(DOC)
    with open(path) as f:
        text = f.read()
    if os.environ.get("RBLN_CUDA_DTYPES_UPDATE"):
        a, b = text.index(_BEGIN), text.index(_END) + len(_END)
        with open(path, "w") as f:
            f.write(text[:a] + render(results) + text[b:])
        return
    want = parse(text)
    got = {(r.entry, r.dtype): r.status for r in results}
    changed = {k: (want.get(k), got.get(k)) for k in set(want) | set(got)
               if want.get(k) != got.get(k)}
    assert not changed, (
        "statuses differ from docs/cuda-dtypes.md (doc, now): "
        + "; ".join(f"{e} {d}: {w} -> {g}" for (e, d), (w, g) in sorted(changed.items()))
        + "\nregenerate: RBLN_CUDA_DTYPES_UPDATE=1 bazel run //rbln/torch/python/tests:cuda_dtypes_test")


def test_acceptance_int32_histc_counts_like_cuda():
    # Issue 30's acceptance: the counts CUDA gives, eagerly and compiled.
    x = torch.tensor([0, 1, 1, 3, 2, 3, 3], dtype=torch.int32, device="rbln")
    got = torch.histc(x, bins=4, min=0, max=3)
    assert got.device.type == "rbln" and got.dtype == torch.int32
    assert got.cpu().tolist() == [1, 2, 1, 3]
    compiled = torch.compile(lambda t: torch.histc(t, bins=4, min=0, max=3), backend="rbln",
                             dynamic=False, fullgraph=True, options={"host_ops": "none"})
    assert compiled(x).cpu().tolist() == [1, 2, 1, 3]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"]))
