#include "backend/cuda/cuda_process_health.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "backend/cuda/cuda_errors.h"

namespace phos::backend::cuda {

bool ProcessHealth::EndsTheProcess(CUresult result) { return IsKernelFault(result); }

void ProcessHealth::Note(CUresult result, const Status& failure) {
  if (!EndsTheProcess(result) || lost()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (lost_.load(std::memory_order_relaxed)) return;
  why_ = "phosd (pid " + std::to_string(getpid()) + ") can no longer use the GPU: " + failure.message() +
         ", a kernel fault, and CUDA cannot recover a process after one (every context of phosd, every app's "
         "GPU state in it, is lost); restart phosd (e.g. systemctl restart phosd), then restart or restore the "
         "apps";
  lost_.store(true, std::memory_order_release);
  spdlog::error("cuda backend: {}", why_);
}

Status ProcessHealth::Check() const {
  if (!lost()) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  return Status::Unavailable(why_);
}

}  // namespace phos::backend::cuda
