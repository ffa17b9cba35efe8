"""Build step of the phos SDK: generate phos._proto (the gRPC stubs) from
proto/phos.proto into the wheel, so generated code is never committed.

Metadata is in pyproject.toml. Install: `pip install ./cli/python` (offline,
with Debian's python3-grpcio/python3-protobuf/python3-setuptools:
`pip install --no-build-isolation ./cli/python`). docs/python-sdk.md.
"""
import os
import shutil
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_stubs  # noqa: E402  (next to this file)


def proto_path():
    """In the repository: ../../proto/phos.proto. In an sdist: the copy
    make_release_tree put next to setup.py."""
    bundled = os.path.join(HERE, "phos.proto")
    return bundled if os.path.isfile(bundled) else gen_stubs.default_proto_path()


class BuildPyWithStubs(build_py):
    def run(self):
        super().run()
        if not self.dry_run:
            gen_stubs.generate(proto_path(), self.build_lib)


class SdistWithProto(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        shutil.copyfile(proto_path(), os.path.join(base_dir, "phos.proto"))
        shutil.copyfile(os.path.join(HERE, "gen_stubs.py"), os.path.join(base_dir, "gen_stubs.py"))


def build_requires():
    """What generating the stubs needs besides setuptools: nothing where
    protoc and grpc_python_plugin are on PATH (gen_stubs.py uses them first:
    Debian's, whose code every protobuf/grpcio the SDK supports imports),
    else grpcio-tools, which pip's isolated build environment then gets
    (setuptools' build backend reports setup_requires as build requirements)."""
    return [] if gen_stubs.have_protoc() else ["grpcio-tools"]


setup(cmdclass={"build_py": BuildPyWithStubs, "sdist": SdistWithProto}, setup_requires=build_requires())
