// A module loaded into the sim: the PTX of the image, decoded once for the
// PTX interpreter. Module variables (.global/.const) live in device memory
// owned by the loading context, so copies to and from them (GetGlobal) are
// ordinary device copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/sim/sim_address_space.h"
#include "common/status.h"
#include "interp/program.h"

namespace phos::backend::sim {

class SimModule {
 public:
  /// Loads an image as cuModuleLoadData takes it: a fatbin (its PTX entry is
  /// used; compressed entries are decompressed) or PTX text. A cubin, or a
  /// fatbin without PTX, is NotSupported: the sim can only run PTX.
  /// Module variables are allocated in `space` for (`device`, `owner`).
  static Status Load(const void* image, std::size_t size, SimAddressSpace* space, int device,
                     std::uint64_t owner, std::shared_ptr<SimModule>* out);

  const interp::Program& program() const { return *program_; }

  /// OK if `name` is a kernel (.entry) of this module and every instruction
  /// it can reach is one the interpreter runs; else NotFound/NotSupported
  /// naming the kernel or the instruction. Walks every reachable op: call
  /// it once per kernel (SimContext::GetFunction), not per launch.
  Status CheckKernel(const std::string& name) const;

 private:
  std::unique_ptr<interp::Program> program_;  // immutable after Load
};

/// Extracts the PTX text from an image (fatbin container or PTX text).
Status ExtractPtx(const void* image, std::size_t size, std::string* ptx);

}  // namespace phos::backend::sim
