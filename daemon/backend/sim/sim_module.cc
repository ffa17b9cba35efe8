#include "backend/sim/sim_module.h"

#include <cstring>
#include <span>

#include "fatbin/fatbin_format.h"
#include "fatbin/fatbin_reader.h"
#include "ptx/ptx_parser.h"

namespace phos::backend::sim {
namespace {

constexpr std::uint32_t kFatbinContainerMagic = 0xBA55ED50u;
constexpr unsigned char kElfMagic[4] = {0x7f, 'E', 'L', 'F'};

}  // namespace

Status ExtractPtx(const void* image, std::size_t size, std::string* ptx) {
  const auto* bytes = static_cast<const std::uint8_t*>(image);
  if (size >= 4 && std::memcmp(bytes, kElfMagic, 4) == 0) {
    return Status::NotSupported(
        "sim backend: the module is a cubin (SASS only); the sim runs kernels from PTX — "
        "build with PTX embedded (-gencode arch=compute_XX,code=compute_XX)");
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
          "build with PTX embedded (-gencode arch=compute_XX,code=compute_XX)");
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

Status SimModule::Load(const void* image, std::size_t size, SimAddressSpace* space, int device,
                       std::uint64_t owner, std::shared_ptr<SimModule>* out) {
  std::string text;
  PHOS_RETURN_IF_ERROR(ExtractPtx(image, size, &text));
  ptx::Module module;
  PHOS_RETURN_IF_ERROR(ptx::ParseModule(text, &module).WithContext("sim LoadModule"));

  interp::StorageAllocator storage;
  storage.allocate = [space, device, owner](size_t bytes, uint8_t** ptr) -> Status {
    DevicePtr p = 0;
    PHOS_RETURN_IF_ERROR(space->Allocate(device, owner, bytes, 0, &p)
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
  *out = std::move(m);
  return Status::Ok();
}

Status SimModule::CheckKernel(const std::string& name) const {
  int f = program_->FindFunction(name);
  if (f < 0 || !program_->function(f).is_entry) {
    return Status::NotFound("no kernel named '" + name + "' in this module");
  }
  return program_->CheckRunnable(f);
}

}  // namespace phos::backend::sim
