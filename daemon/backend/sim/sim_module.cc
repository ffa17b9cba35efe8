#include "backend/sim/sim_module.h"

#include <cuda.h>

#include <algorithm>
#include <cstring>
#include <variant>
#include <span>

#include "fatbin/fatbin_format.h"
#include "fatbin/fatbin_reader.h"
#include "fatbin/nv_info.h"
#include "common/occupancy.h"
#include "interp/device_runtime_ptx.h"
#include "ptx/ptx_parser.h"

namespace phos::backend::sim {
namespace {

constexpr std::uint32_t kFatbinContainerMagic = 0xBA55ED50u;
constexpr unsigned char kElfMagic[4] = {0x7f, 'E', 'L', 'F'};
// Shared memory a block may use without cuFuncSetAttribute (static + dynamic).
constexpr std::uint64_t kDefaultSharedLimit = 48 * 1024;

// What the cubins of a fatbin say about its kernels (registers, arch).
struct CubinFacts {
  std::map<std::string, int> registers;  // kernel name -> EIATTR_REGCOUNT
  int sm_arch = 0;                       // of the first cubin, 0 if none
};

// Best effort: an image without cubins, or one whose cubins cannot be read,
// just has no facts (the attributes fall back to modelled values).
CubinFacts ReadCubinFacts(const void* image, std::size_t size) {
  CubinFacts facts;
  std::uint32_t magic = 0;
  if (size >= 4) std::memcpy(&magic, image, 4);
  if (magic != kFatbinContainerMagic) return facts;
  fatbin::Fatbin fb;
  if (!fatbin::ParseFatbin(std::span<const std::uint8_t>(static_cast<const std::uint8_t*>(image), size), &fb).ok()) {
    return facts;
  }
  for (const auto& e : fb.entries) {
    if (!e.is_elf()) continue;
    fatbin::CubinInfo info;
    if (!fatbin::ReadCubinInfo(e.contents, &info).ok()) continue;
    if (facts.sm_arch == 0) facts.sm_arch = static_cast<int>(e.sm_arch);
    for (const auto& k : info.kernels) {
      if (k.regcount != 0) facts.registers.emplace(k.name, static_cast<int>(k.regcount));
    }
  }
  return facts;
}

// "sm_90" / "sm_90a" / "compute_90" -> 90; 0 if unrecognised.
int ArchNumber(const std::vector<std::string>& target) {
  for (const std::string& t : target) {
    const std::size_t u = t.find('_');
    if (u == std::string::npos) continue;
    int v = 0;
    for (std::size_t i = u + 1; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i) {
      v = v * 10 + (t[i] - '0');
      if (v > 100000) {  // no such architecture (and no int overflow: found by dispatch_fuzz)
        v = 0;
        break;
      }
    }
    if (v != 0) return v;
  }
  return 0;
}

std::uint64_t ConstBytes(const ptx::Module& module) {
  std::uint64_t total = 0;
  for (const auto& item : module.items) {
    const auto* v = std::get_if<ptx::VarDecl>(&item);
    if (v == nullptr || v->space != ptx::Space::kConst) continue;
    std::uint64_t bytes = static_cast<std::uint64_t>(std::max(ptx::TypeBits(v->type), 8) / 8) * v->vec;
    for (int64_t d : v->dims) bytes *= d > 0 ? static_cast<std::uint64_t>(d) : 0;
    total += bytes;
  }
  return total;
}

// The product of a `.maxntid` / `.reqntid` directive's arguments, 0 if none.
int DeclaredBlockSize(const ptx::Function& f) {
  for (const auto& d : f.directives) {
    if ((d.name == "maxntid" || d.name == "reqntid") && !d.args.empty()) {
      std::int64_t n = 1;
      for (std::int64_t a : d.args) n *= a;
      return static_cast<int>(std::clamp<std::int64_t>(n, 1, 1024));
    }
  }
  return 0;
}

int DeclaredMaxRegisters(const ptx::Function& f) {
  for (const auto& d : f.directives) {
    if (d.name == "maxnreg" && !d.args.empty()) return static_cast<int>(std::clamp<std::int64_t>(d.args[0], 1, 255));
  }
  return 0;
}

}  // namespace

// A module with machine code only is, to the app, a module built for other
// GPUs: CUDA_ERROR_NO_BINARY_FOR_GPU, which the CUDA runtime tolerates at
// registration (cuBLAS registers hundreds of fatbins for other GPUs) and
// reports at the launch of one of its kernels.
constexpr int kNoKernelImageForDevice = CUDA_ERROR_NO_BINARY_FOR_GPU;

Status ExtractPtx(const void* image, std::size_t size, std::string* ptx) {
  const auto* bytes = static_cast<const std::uint8_t*>(image);
  if (size >= 4 && std::memcmp(bytes, kElfMagic, 4) == 0) {
    return Status::NotSupported(
        "sim backend: the module is a cubin (SASS only); the sim runs kernels from PTX — "
        "build with PTX embedded (-gencode arch=compute_XX,code=compute_XX)").WithApiError(kNoKernelImageForDevice);
  }
  std::uint32_t magic = 0;
  if (size >= 4) std::memcpy(&magic, bytes, 4);
  if (magic == kFatbinContainerMagic) {
    fatbin::Fatbin fb;
    PHOS_RETURN_IF_ERROR(fatbin::ParseFatbin(std::span<const std::uint8_t>(bytes, size), &fb)
                             .WithContext("sim LoadModule"));
    long i = fatbin::FindPtx(fb);
    if (i < 0) {
      return Status::NotSupported(
          "sim backend: the fatbin holds no PTX (SASS only); the sim runs kernels from PTX — "
          "build with PTX embedded (-gencode arch=compute_XX,code=compute_XX)").WithApiError(kNoKernelImageForDevice);
    }
    std::string_view text = fb.entries[static_cast<std::size_t>(i)].ptx_text();
    ptx->assign(text.data(), text.size());
    return Status::Ok();
  }
  // PTX text: cuModuleLoadData takes it NUL-terminated; `size` may include
  // the NUL or not.
  std::size_t n = strnlen(reinterpret_cast<const char*>(bytes), size);
  ptx->assign(reinterpret_cast<const char*>(bytes), n);
  if (ptx->find(".version") == std::string::npos) {
    return Status::InvalidArgument(
        "sim LoadModule: image is neither a fatbin, a cubin nor PTX text (no .version)");
  }
  return Status::Ok();
}

Status SimModule::LoadMachineCodeOnly(const void* image, std::size_t size, Status no_ptx,
                                      std::shared_ptr<SimModule>* out) {
  const auto* bytes = static_cast<const std::uint8_t*>(image);
  const Status no_binary =
      Status::NotSupported(no_ptx.message() + " (and it holds no SASS for sm_" + std::to_string(kModelledSmArch) +
                           ", the modelled H100's)")
          .WithApiError(kNoKernelImageForDevice);
  fatbin::Fatbin fb;  // owns the decompressed cubin `cubin` points into
  std::span<const std::uint8_t> cubin;
  if (size >= 4 && std::memcmp(bytes, kElfMagic, 4) == 0) {
    cubin = {bytes, size};
  } else {
    PHOS_RETURN_IF_ERROR(fatbin::ParseFatbin(std::span<const std::uint8_t>(bytes, size), &fb)
                             .WithContext("sim LoadModule"));
    const long i = fatbin::FindCubin(fb, kModelledSmArch);
    if (i < 0) return no_binary;
    cubin = fb.entries[static_cast<std::size_t>(i)].contents;
  }
  fatbin::CubinInfo info;
  PHOS_RETURN_IF_ERROR(fatbin::ReadCubinInfo(cubin, &info).WithContext("sim LoadModule: the module's cubin"));
  if (info.sm_arch != kModelledSmArch) return no_binary;

  auto m = std::shared_ptr<SimModule>(new SimModule());
  m->machine_code_only_ = "the module holds SASS only (for sm_" + std::to_string(kModelledSmArch) +
                          "), no PTX; the sim runs kernels from PTX only — build with PTX embedded "
                          "(-gencode arch=compute_XX,code=compute_XX) or run on a GPU";
  const occupancy::SmLimits limits;
  for (const fatbin::KernelNvInfo& k : info.kernels) {
    FunctionAttributes a;
    a.num_regs = k.regcount != 0 ? static_cast<int>(k.regcount) : kModelledRegisters;
    a.max_threads_per_block =
        std::min(limits.max_threads_per_block, occupancy::MaxThreadsPerBlockForRegisters(limits, a.num_regs));
    a.local_size_bytes = k.frame_size;
    a.ptx_version = static_cast<int>(kModelledSmArch);
    a.binary_version = static_cast<int>(kModelledSmArch);
    a.max_dynamic_shared_size_bytes = static_cast<int>(kDefaultSharedLimit);
    m->attributes_.emplace(k.name, a);
  }
  *out = std::move(m);
  return Status::Ok();
}

Status SimModule::Load(const void* image, std::size_t size, SimAddressSpace* space, int device,
                       std::uint64_t owner, DevicePtr globals_at, std::shared_ptr<SimModule>* out) {
  std::string text;
  Status extracted = ExtractPtx(image, size, &text);
  if (extracted.code() == Status::Code::kNotSupported) {
    return LoadMachineCodeOnly(image, size, std::move(extracted), out);
  }
  PHOS_RETURN_IF_ERROR(extracted);
  ptx::Module module;
  PHOS_RETURN_IF_ERROR(ptx::ParseModule(text, &module).WithContext("sim LoadModule"));
  // Calls into CUDA's device runtime library (SASS only) get phos's own
  // bodies where it has them (numba's grid sync); others stay refused.
  interp::SupplyDeviceRuntime(&module);

  interp::StorageAllocator storage;
  storage.allocate = [space, device, owner, globals_at](size_t bytes, uint8_t** ptr) -> Status {
    DevicePtr p = 0;
    PHOS_RETURN_IF_ERROR(space->Allocate(device, owner, bytes, globals_at, &p)
                             .WithContext("module variables"));
    *ptr = reinterpret_cast<uint8_t*>(p);
    return Status::Ok();
  };
  // The context may have freed everything already (FreeAllOwnedBy at
  // teardown); a failed Free here is harmless.
  storage.release = [space, owner](uint8_t* ptr) {
    (void)space->Free(owner, reinterpret_cast<DevicePtr>(ptr));
  };
  auto m = std::shared_ptr<SimModule>(new SimModule());
  PHOS_RETURN_IF_ERROR(interp::Program::Build(module, storage, &m->program_)
                           .WithContext("sim LoadModule"));

  const CubinFacts facts = ReadCubinFacts(image, size);
  const int ptx_arch = ArchNumber(module.target);
  const std::uint64_t const_bytes = ConstBytes(module);
  const occupancy::SmLimits limits;  // the modelled H100's (sim_backend.cc)
  for (const ptx::Function* f : module.Kernels()) {
    const std::uint64_t static_shared = m->program_->static_shared_bytes(f->name);
    FunctionAttributes a;
    auto regs = facts.registers.find(f->name);
    a.num_regs = regs != facts.registers.end() ? regs->second : DeclaredMaxRegisters(*f);
    if (a.num_regs == 0) a.num_regs = kModelledRegisters;
    const int declared = DeclaredBlockSize(*f);
    a.max_threads_per_block = std::min(declared != 0 ? declared : limits.max_threads_per_block,
                                       occupancy::MaxThreadsPerBlockForRegisters(limits, a.num_regs));
    a.shared_size_bytes = static_shared;
    a.const_size_bytes = const_bytes;
    const int fi = m->program_->FindFunction(f->name);
    a.local_size_bytes = fi >= 0 ? m->program_->function(fi).local_size : 0;
    a.ptx_version = ptx_arch;
    a.binary_version = facts.sm_arch != 0 ? facts.sm_arch : ptx_arch;
    a.max_dynamic_shared_size_bytes =
        static_cast<int>(static_shared >= kDefaultSharedLimit ? 0 : kDefaultSharedLimit - static_shared);
    m->attributes_.emplace(f->name, a);
  }
  *out = std::move(m);
  return Status::Ok();
}

Status SimModule::KernelAttributes(const std::string& name, FunctionAttributes* out) const {
  auto it = attributes_.find(name);
  if (it == attributes_.end()) return Status::NotFound("no kernel named '" + name + "' in this module");
  *out = it->second;
  return Status::Ok();
}

Status SimModule::GetGlobal(const std::string& name, DevicePtr* addr, std::size_t* bytes) const {
  if (program_ == nullptr) {
    return Status::NotSupported("variable '" + name + "': " + machine_code_only_ +
                                " (the sim places no variables for such a module)");
  }
  std::uint64_t a = 0;
  std::size_t n = 0;
  if (!program_->SymbolAddress(name, &a, &n)) return Status::NotFound("no variable named '" + name + "'");
  *addr = a;
  *bytes = n;
  return Status::Ok();
}

Status SimModule::CheckKernel(const std::string& name) const {
  if (program_ == nullptr) {
    if (attributes_.count(name) == 0) return Status::NotFound("no kernel named '" + name + "' in this module");
    return Status::NotSupported("kernel '" + name + "': " + machine_code_only_).WithApiError(kNoKernelImageForDevice);
  }
  int f = program_->FindFunction(name);
  if (f < 0 || !program_->function(f).is_entry) {
    return Status::NotFound("no kernel named '" + name + "' in this module");
  }
  return program_->CheckRunnable(f);
}

}  // namespace phos::backend::sim
