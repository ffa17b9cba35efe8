#!/usr/bin/env python3
"""The SDK's tests against the package installed as a user installs it: pip
installs cli/python into a venv holding PyPI's grpcio and protobuf, and the
tests import that installed package, never the source tree (ctest's
python_sdk_venv_* tests, cli/python/CMakeLists.txt).

    installed_sdk.py install --base /opt/phos/sdk-venv --venv BUILD/cli/python/sdk-venv
    installed_sdk.py run --venv BUILD/cli/python/sdk-venv test_sdk_streams [test_sdk_daemon ...]

install: BASE is the venv scripts/setup.sh makes: the newest grpcio and
protobuf from PyPI within cli/python/pyproject.toml's bounds. VENV is made
anew, empty, its site-packages reaching BASE's through a .pth file (nothing
is downloaded or copied, BASE is only read, so several build trees can test
at once), and `pip install` installs the SDK into it from a copy of the
source tree's cli/python and proto/ (pip builds inside the tree it installs
from; the source tree stays untouched), with --no-deps (BASE holds them) and
--no-build-isolation (BASE's setuptools: offline, seconds). `pip check` then
confirms BASE's versions satisfy what the package declares. Fails, saying to
run scripts/setup.sh, when BASE is missing.

run: VENV's python runs the test modules (unittest) from this directory with
no PYTHONPATH, once `import phos` is seen to load the installed package.
Only the standard library: runs with any python3.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

TESTS = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(TESTS)  # cli/python
REPO = os.path.dirname(os.path.dirname(SDK))
SETUP_HINT = "run scripts/setup.sh (as root) to make it, or point -DPHOS_SDK_VENV at one"


class Failure(Exception):
    pass


def clean_env():
    """The environment without anything that would put other code on sys.path."""
    env = dict(os.environ)
    for var in ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONSTARTUP", "VIRTUAL_ENV"):
        env.pop(var, None)
    env["PYTHONNOUSERSITE"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INPUT"] = "1"
    return env


def python_of(venv):
    return os.path.join(venv, "bin", "python")


def ask(python, code, cwd=None):
    """What `python -c code` prints (stripped); Failure with its stderr if it fails."""
    p = subprocess.run([python, "-c", code], capture_output=True, text=True, env=clean_env(), cwd=cwd or TESTS)
    if p.returncode != 0:
        raise Failure("%s -c %r failed:\n%s" % (python, code, (p.stdout + p.stderr).strip()))
    return p.stdout.strip()


def site_dirs(python):
    return ask(python, "import sysconfig; p = sysconfig.get_paths(); "
                       "print('\\n'.join(dict.fromkeys([p['purelib'], p['platlib']])))").splitlines()


def versions(python):
    return ask(python, "import sys, grpc, google.protobuf as p; "
                       "from google.protobuf.internal import api_implementation as a; "
                       "print('python %s, protobuf %s (%s), grpcio %s' % (sys.version.split()[0], p.__version__, "
                       "a.Type(), grpc.__version__))")


def check_base(base):
    python = python_of(base)
    if not os.path.exists(python):
        raise Failure("no SDK venv at %s (PyPI's grpcio and protobuf, for the installed-package tests): %s"
                      % (base, SETUP_HINT))
    try:
        found = versions(python)
    except Failure as e:
        raise Failure("the SDK venv %s cannot import grpc and google.protobuf: %s\n%s" % (base, SETUP_HINT, e))
    has_phos = subprocess.run([python, "-c", "import importlib.metadata as m; m.version('phos')"],
                              capture_output=True, env=clean_env(), cwd=TESTS).returncode == 0
    if has_phos:
        raise Failure("%s has the phos package installed; it must hold only its dependencies (the tests install "
                      "phos into a venv of their own): %s -m pip uninstall phos" % (base, python))
    return python, found


def copy_sources(into):
    """cli/python (without tests and build outputs) and proto/, laid out as in
    the repository, so setup.py finds ../../proto/phos.proto as it does there."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info", "tests", "sdk-venv")
    shutil.copytree(SDK, os.path.join(into, "cli", "python"), ignore=ignore)
    os.makedirs(os.path.join(into, "proto"))
    shutil.copyfile(os.path.join(REPO, "proto", "phos.proto"), os.path.join(into, "proto", "phos.proto"))
    return os.path.join(into, "cli", "python")


def install(base, venv):
    base_python, found = check_base(base)
    print("SDK venv %s: %s" % (base, found))
    if os.path.lexists(venv):
        shutil.rmtree(venv)
    # The venv module of BASE's python makes a venv of the interpreter BASE
    # was made from; --without-pip: pip comes from BASE through the .pth.
    subprocess.run([base_python, "-m", "venv", "--without-pip", venv], check=True, env=clean_env())
    python = python_of(venv)
    lines = ["import site; site.addsitedir(%r)\n" % d for d in site_dirs(base_python)]
    for d in site_dirs(python):
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "_phos_sdk_base.pth"), "w") as f:
            f.writelines(lines)
    with tempfile.TemporaryDirectory(prefix="sdk-src-", dir=os.path.dirname(os.path.abspath(venv))) as tmp:
        src = copy_sources(tmp)
        p = subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                            "--no-index", "--force-reinstall", src],
                           capture_output=True, text=True, env=clean_env(), cwd=tmp)
        if p.returncode != 0:
            raise Failure("pip install of cli/python into %s failed:\n%s" % (venv, (p.stdout + p.stderr).strip()))
    p = subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True, env=clean_env(), cwd=TESTS)
    if p.returncode != 0:
        raise Failure("the SDK venv's packages do not satisfy what cli/python/pyproject.toml declares:\n%s\n"
                      "(scripts/setup.sh installs the newest within its bounds: rm -rf %s and run it again; "
                      "a new major version is supported once the SDK's tests pass with it: raise the bound)"
                      % ((p.stdout + p.stderr).strip(), base))
    where = check_installed(venv)
    with open(os.path.join(where, "_proto", "phos_pb2.py")) as f:
        head = f.read(400)
    generator = "grpcio-tools" if "Protobuf Python Version" in head else "protoc on PATH"
    print("installed phos into %s (%s; stubs by %s)" % (venv, versions(python), generator))


def check_installed(venv):
    """The installed package's directory; Failure unless `import phos` from
    the tests' directory loads it from VENV."""
    python = python_of(venv)
    if not os.path.exists(python):
        raise Failure("no venv with the installed SDK at %s: ctest's python_sdk_venv_install makes it (it runs "
                      "first, as this test's fixture), from scripts/setup.sh's venv" % venv)
    where = os.path.dirname(ask(python, "import phos; print(phos.__file__)"))
    inside = [d for d in site_dirs(python) if os.path.realpath(where).startswith(os.path.realpath(d) + os.sep)]
    if not inside:
        raise Failure("`import phos` in %s loads %s, not the package installed in the venv" % (venv, where))
    return where


def run(venv, modules):
    where = check_installed(venv)
    print("testing phos installed at %s (%s)" % (where, versions(python_of(venv))), flush=True)
    return subprocess.call([python_of(venv), "-m", "unittest", "-v"] + modules, env=clean_env(), cwd=TESTS)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    i = sub.add_parser("install", help="make VENV on BASE and pip install cli/python into it")
    i.add_argument("--base", required=True, help="the venv scripts/setup.sh makes (PyPI's grpcio, protobuf)")
    i.add_argument("--venv", required=True, help="the venv to make (removed first)")
    r = sub.add_parser("run", help="run test modules with VENV's python")
    r.add_argument("--venv", required=True)
    r.add_argument("modules", nargs="+", help="test modules in cli/python/tests (test_sdk_streams, ...)")
    args = ap.parse_args()
    try:
        if args.command == "install":
            install(args.base, args.venv)
            return 0
        return run(args.venv, args.modules)
    except Failure as e:
        print("installed_sdk: FAILED: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
