// The real CUDA library behind one of phos's JIT shims (nvJitLink, NVRTC;
// docs/interposer.md "JIT-compiled kernels keep their PTX").
//
// A shim carries the real library's soname (libnvJitLink.so.13,
// libnvrtc.so.13) so that the program, and loaders that ask "is it already
// loaded?" (CUDA Python's pathfinder), bind to it; it therefore cannot find
// the real library by that name and looks for the file instead, once, on
// the first call.
#pragma once

#include <string>

namespace phos::jit {

class RealLibrary {
 public:
  /// `file`: the real library's file name ("libnvrtc.so.13"); `env`: the
  /// variable that names its path ("PHOS_NVRTC").
  RealLibrary(const char* file, const char* env);

  /// dlsym in the real library: nullptr when it was not found or lacks
  /// `name` (said once on stderr). The first call searches, in order:
  ///   1. $env (a path; when set, nothing else is tried);
  ///   2. next to a loaded CUDA library (libnvvm, libnvrtc, libnvJitLink,
  ///      libcudart, libcublas: the toolkit's and the PyPI wheels' lib
  ///      directories) and in the `nvidia/cu13/lib` of a loaded module's
  ///      site-packages;
  ///   3. each directory of $LD_LIBRARY_PATH;
  ///   4. $CUDA_HOME/lib64, $CUDA_PATH/lib64, /usr/local/cuda/lib64.
  /// A candidate that is a phos shim itself (the file this code is in) is
  /// skipped.
  void* Symbol(const char* name);

 private:
  void Find();

  const char* const file_;
  const char* const env_;
  // Written once, under Symbol's lock, before searched_; read after it.
  bool searched_ = false;
  void* handle_ = nullptr;
  std::string description_;
};

/// Writes "phos: <what>: <message>" to stderr once per distinct message.
void LogOnce(const std::string& what, const std::string& message);

}  // namespace phos::jit
