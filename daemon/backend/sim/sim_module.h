// A module loaded into the sim: the PTX of the image, decoded once for the
// PTX interpreter. Module variables (.global/.const) live in device memory
// owned by the loading context, so copies to and from them (GetGlobal) are
// ordinary device copies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/sim/sim_address_space.h"
#include "common/status.h"
#include "interp/program.h"

namespace phos::backend::sim {

class SimModule {
 public:
  /// Loads an image as cuModuleLoadData takes it: a fatbin (its PTX entry is
  /// used; compressed entries are decompressed) or PTX text.
  ///
  /// An image with machine code only (a cubin, a fatbin without PTX) loads
  /// as it would on the modelled H100 when it holds SASS for sm_90 — its
  /// kernels are named and described by that cubin, but none can run on
  /// the sim (CheckKernel refuses each by name, so their launches fail with
  /// CUDA_ERROR_NO_BINARY_FOR_GPU) and its variables cannot be reached
  /// (their attributes: the cubin's registers and local size, ptx and
  /// binary version 90, CUDA's default shared limit). A library's runtime
  /// that loads all its fatbins at start must not stop at one such
  /// (cuSPARSE has one). SASS for any other GPU is NO_BINARY_FOR_GPU at
  /// load, as an H100's driver answers.
  /// Module variables are allocated in `space` for (`device`, `owner`), as
  /// one block: anywhere when `globals_at` is 0, else exactly there (a
  /// restore putting them back where the app saw them; AlreadyExists when
  /// the range is taken).
  static Status Load(const void* image, std::size_t size, SimAddressSpace* space, int device,
                     std::uint64_t owner, DevicePtr globals_at, std::shared_ptr<SimModule>* out);

  /// The decoded PTX. Only for a kernel CheckKernel accepted (a module
  /// with machine code only has none).
  const interp::Program& program() const { return *program_; }

  /// Where the module's variables start, 0 when it has none (or has
  /// machine code only: the sim places no variables for it).
  DevicePtr globals_base() const { return program_ != nullptr ? program_->storage_base() : 0; }

  /// Address and size of module variable `name`: NotFound when there is
  /// none; NotSupported in a module with machine code only.
  Status GetGlobal(const std::string& name, DevicePtr* addr, std::size_t* bytes) const;

  /// OK if `name` is a kernel (.entry) of this module and every instruction
  /// it can reach is one the interpreter runs; else NotFound/NotSupported
  /// naming the kernel or the instruction (NotSupported with
  /// NO_BINARY_FOR_GPU for every kernel of a module with machine code
  /// only). Walks every reachable op: call it once per kernel
  /// (SimContext::GetFunction), not per launch.
  Status CheckKernel(const std::string& name) const;

  /// The kernel's attributes as loaded (settable ones at their defaults),
  /// derived once at Load:
  ///   shared_size_bytes   the module's static .shared bytes (what the
  ///                       interpreter gives every block of any kernel)
  ///   const_size_bytes    the module's .const variables
  ///   local_size_bytes    the kernel's .local depot
  ///   num_regs            EIATTR_REGCOUNT of the fatbin's cubin for the
  ///                       kernel when there is one; else `.maxnreg` of the
  ///                       PTX; else kModelledRegisters
  ///   ptx_version         the PTX `.target` (sm_90 -> 90)
  ///   binary_version      the cubin's arch when the fatbin has one, else
  ///                       the PTX target (the sim "JITs" the PTX)
  ///   max_threads_per_block  .maxntid/.reqntid product, else 1024, capped
  ///                       by what num_regs allows (occupancy.h)
  ///   max_dynamic_shared_size_bytes  48 KiB - static shared (CUDA's default)
  /// NotFound if `name` is not a kernel.
  Status KernelAttributes(const std::string& name, FunctionAttributes* out) const;

  /// Registers per thread assumed for a kernel whose fatbin carries no
  /// cubin (PTX-only): a PTX virtual register count says nothing about
  /// the hardware registers ptxas would assign; 32 is typical of small
  /// kernels and keeps the occupancy of a 1024-thread block at 2 per SM.
  static constexpr int kModelledRegisters = 32;

  /// The SASS architecture the modelled H100 runs (sm_90).
  static constexpr std::uint32_t kModelledSmArch = 90;

 private:
  // A module with SASS for the modelled GPU and no PTX.
  static Status LoadMachineCodeOnly(const void* image, std::size_t size, Status no_ptx,
                                    std::shared_ptr<SimModule>* out);

  std::unique_ptr<interp::Program> program_;  // immutable after Load; null for machine code only
  std::string machine_code_only_;             // why no kernel runs ("" when program_ is set)
  std::map<std::string, FunctionAttributes> attributes_;  // by kernel name; immutable after Load
};

/// Extracts the PTX text from an image (fatbin container or PTX text).
Status ExtractPtx(const void* image, std::size_t size, std::string* ptx);

}  // namespace phos::backend::sim
