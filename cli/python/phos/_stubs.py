"""The generated gRPC modules (phos._proto), with a clear error when missing.

They are generated at build time from proto/phos.proto (gen_stubs.py), never
committed: `pip install ./cli/python` puts them inside the installed package;
a CMake build writes them to build/cli/python/gen/phos/_proto, which joins this
package when that directory is on sys.path (see pkgutil.extend_path in
phos/__init__.py).
"""
try:
    from ._proto import phos_pb2 as pb  # noqa: F401
    from ._proto import phos_pb2_grpc as pb_grpc  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on how phos was installed
    raise ImportError(
        "phos: the generated gRPC stubs (phos._proto) are missing: install the SDK with "
        "`pip install ./cli/python`, or build the CMake target phos_python_stubs and put "
        "build/cli/python/gen on PYTHONPATH next to cli/python (%s)" % e) from e
