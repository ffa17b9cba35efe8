"""The check-and-report helper the framework scripts share: each check
prints one line "<script>: <name>: <detail>" and raises on failure (a
non-zero exit); done() prints "<script>: OK (<n> checks)", the line
tests/frameworks/CMakeLists.txt expects."""
import numpy as np


class Checks:
    def __init__(self, script):
        self.script = script
        self.passed = []

    def ok(self, name, cond, detail):
        if not cond:
            raise AssertionError(f"{name}: {detail}")
        self.passed.append(name)
        print(f"{self.script}: {name}: {detail}", flush=True)

    def close(self, name, got, want, rtol, atol):
        """`got` (host data) has `want`'s shape and matches it within the
        tolerances, as numpy.allclose."""
        got, want = np.asarray(got), np.asarray(want)
        good = got.shape == want.shape and bool(np.allclose(got, want, rtol=rtol, atol=atol))
        if good:
            err = f" (max |error| {float(np.max(np.abs(got - want))):.2e})" if got.size else ""
            detail = "matches numpy" + err
        else:
            detail = f"got {np.ravel(got)[:4]}, want {np.ravel(want)[:4]} (shapes {got.shape}, {want.shape})"
        self.ok(name, good, detail)

    def done(self):
        print(f"{self.script}: OK ({len(self.passed)} checks)", flush=True)
