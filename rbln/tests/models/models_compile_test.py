"""Model suite, compiled mode: torch.compile(model, backend="rbln",
dynamic=False) of each float16 model gives the float32 CPU output, and does
so as device programs only:

  * as many graphs as Dynamo captures for the model on the CPU (no graph
    break of the backend's own), each one rbln program with no host op;
  * no CPU fallback (TORCH_RBLN_DISABLE_FALLBACK=compile_error makes a
    compile failure raise here), counted by graph/compiles, graph/runs,
    graph/cpu_fallback and graph/host_ops;
  * explain() of a warm step is [clean];
  * compile time, warm latency and the ratio to the CPU's eager forward are
    in the results table."""
# spec: J1, J3, J6, J7, N2, P9

import os
import sys

os.environ.setdefault("TORCH_RBLN_DISABLE_FALLBACK", "compile_error")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch._dynamo  # noqa: E402
import transformers  # noqa: E402

import model_zoo  # noqa: E402
from suite_util import (DEV, Results, ResultsPlugin, assert_close_fp16, best_of,  # noqa: E402
                        blocked_on_missing_kernels, counters, delta, logits, timed, to_device)

transformers.logging.set_verbosity_error()
RESULTS = Results(model_zoo.COMPILED, ["compile_s", "warm_ms", "cpu_ms", "rbln_over_cpu",
                                       "graphs", "programs", "max_abs_err"])


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("spec", model_zoo.params(model_zoo.COMPILED))
def test_compiled_forward_is_one_program_per_graph(spec):
    spec.check_blockers(model_zoo.COMPILED)
    model = spec.make()
    inputs = spec.example()
    with torch.no_grad():
        want = logits(model(**inputs))
        cpu_ms = best_of(lambda: model(**inputs)) * 1e3
    dev = model.half().to(DEV)
    dev_inputs = to_device(inputs)
    f = torch.compile(dev, backend="rbln", dynamic=False)
    c0 = counters()
    with torch.no_grad():
        out, compile_s = timed(lambda: blocked_on_missing_kernels(lambda: logits(f(**dev_inputs))))
    c1 = counters()
    assert out.device == torch.device(DEV)
    assert_close_fp16(out, want, f"{spec.name} logits")

    graphs = torch.rbln.compiled_programs()
    assert len(graphs) == spec.graphs, [g.name for g in graphs]
    for graph in graphs:
        info = graph.inspect()
        assert len(info["programs"]) == 1 and info["host_ops"] == [], (graph.name, info["ops"])
    assert delta(c0, c1, "graph/compiles") == spec.graphs
    assert delta(c0, c1, "graph/runs") == spec.graphs
    assert delta(c0, c1, "graph/cpu_fallback") == 0 and delta(c0, c1, "graph/host_ops") == 0

    with torch.no_grad():
        warm_s = best_of(lambda: f(**dev_inputs))
        with torch.rbln.explain() as region:
            f(**dev_inputs)
    assert region.verdict() == "clean", region.report()
    RESULTS.add(spec.name, compile_s=compile_s, warm_ms=warm_s * 1e3, cpu_ms=cpu_ms,
                rbln_over_cpu=warm_s * 1e3 / cpu_ms, graphs=len(graphs),
                programs=sum(len(g.inspect()["programs"]) for g in graphs),
                max_abs_err=(out.cpu().float() - want).abs().max().item())


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-p", "no:cacheprovider"], plugins=[ResultsPlugin()]))
