"""The check-and-report helper the framework scripts share: each check
prints one line "<script>: <name>: <detail>" and raises on failure (a
non-zero exit); done() prints "<script>: OK (<n> checks)", the line
tests/frameworks/CMakeLists.txt expects."""


class Checks:
    def __init__(self, script):
        self.script = script
        self.passed = []

    def ok(self, name, cond, detail):
        if not cond:
            raise AssertionError(f"{name}: {detail}")
        self.passed.append(name)
        print(f"{self.script}: {name}: {detail}", flush=True)

    def done(self):
        print(f"{self.script}: OK ({len(self.passed)} checks)", flush=True)
