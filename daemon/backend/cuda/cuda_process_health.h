// Whether this process's CUDA still works. A kernel fault (an illegal
// address, a trap, a misaligned access, ...) in ANY context ends CUDA for
// the whole process: seen on an H200 (driver 580.159.04, docs/gpu-report.md),
// every later cuCtxCreate in phosd answered CUDA_ERROR_ILLEGAL_ADDRESS, and
// CUDA's documentation says the process must be restarted. phosd holds the
// contexts of every app it serves, so one app's fault takes the GPU from all
// of them (docs/backends.md "A kernel fault is the whole process's").
//
// ProcessHealth records the first such fault, logs it once with what to do,
// and makes the backend refuse new contexts with that reason instead of
// letting each new app fail in cuCtxCreate with an error that names no
// cause. One per CudaBackend, shared with its contexts. Thread-safe.
#pragma once

#include <cuda.h>

#include <atomic>
#include <mutex>
#include <string>

#include "common/status.h"

namespace phos::backend::cuda {

class ProcessHealth {
 public:
  /// True for the results that end CUDA for the process: kernel faults
  /// (700, 710, 714..719).
  static bool EndsTheProcess(CUresult result);

  /// Records `failure` (CudaStatus of a driver call: "what: CUDA_ERROR_X
  /// (description)") if `result` ends the process and nothing did before
  /// (the first cause is the one reported); logs it once at error level.
  void Note(CUresult result, const Status& failure);

  /// OK while CUDA works; Unavailable with the first fault and what to do.
  Status Check() const;
  bool lost() const { return lost_.load(std::memory_order_acquire); }

 private:
  std::atomic<bool> lost_{false};
  mutable std::mutex mu_;
  std::string why_;  // guarded by mu_; set once, with lost_
};

}  // namespace phos::backend::cuda
