// The real nvJitLink, behind phos's shim of it (docs/interposer.md
// "JIT-linked kernels keep their PTX").
//
// The shim carries the library's soname (libnvJitLink.so.13) so that the
// program, and loaders that ask "is it already loaded?" (CUDA Python's
// pathfinder), bind to it; it therefore cannot find the real library by
// that name and looks for the file instead, once, on the first call.
#pragma once

#include <string>

namespace phos::jit {

/// dlsym in the real library: nullptr when the library was not found or
/// lacks `name`. The first call searches, in order:
///   1. $PHOS_NVJITLINK (a path to the real libnvJitLink.so.13; when set,
///      nothing else is tried);
///   2. next to a loaded CUDA library (libnvvm, libnvrtc, libcudart,
///      libcublas: the toolkit's and the PyPI wheels' lib directories) and
///      in the `nvidia/cu13/lib` of a loaded module's site-packages;
///   3. each directory of $LD_LIBRARY_PATH;
///   4. $CUDA_HOME/lib64, $CUDA_PATH/lib64, /usr/local/cuda/lib64.
/// A candidate that is this shim itself (same file) is skipped.
void* RealSymbol(const char* name);

/// Where the real library was loaded from, or why it was not ("not found:
/// ..."); for messages.
const std::string& RealLibraryDescription();

/// Writes "phos: nvJitLink: <message>" to stderr once per distinct message.
void LogOnce(const std::string& message);

}  // namespace phos::jit
