"""rbln_py_test: one test file of the torch_rbln package, run as a script."""

def rbln_py_test(name, srcs = None, deps = [], **kwargs):
    """A py_test of `<name>.py` (unless srcs says otherwise) that imports torch_rbln.

    Every test here loads the package and its _C extension; the helpers the
    tests share (:rbln_test_util, :rbln_dist_util, :autocast_policy) come in
    through deps. Other attributes (size, data, env, main) pass through.
    """
    native.py_test(
        name = name,
        srcs = srcs or [name + ".py"],
        deps = deps + ["//rbln/torch:torch_rbln"],
        **kwargs
    )
