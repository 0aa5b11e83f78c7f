"""Where a test finds a doc it checks (docs/*.md with a generated table)."""

import os


def workspace_doc(relpath):
    """The doc at `relpath` in the source tree under `bazel run` (so that an
    update writes it), else in the test's runfiles (a data dependency)."""
    root = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    if root:
        return os.path.join(root, relpath)
    for base in (os.environ.get("TEST_SRCDIR", ""), os.getcwd()):
        for candidate in (os.path.join(base, "__main__", relpath), os.path.join(base, relpath)):
            if os.path.exists(candidate):
                return candidate
    raise FileNotFoundError(f"{relpath} not found in the runfiles (is it a data dependency?)")
