// Kernel parameter layouts read from a module image (fatbin, cubin or PTX
// text), shared by nvcc's registration path (registration.cc) and the
// driver API's cuModuleLoad* (driver_module.cc). A launch packs each
// argument at its slot's offset (launch.cc, driver_module.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "fatbin/fatbin_reader.h"
#include "fatbin/nv_info.h"
#include "interposer/client/client_internal.h"

namespace phos::client {

/// What a module image says about its kernels' parameters: the .nv.info
/// tables of every cubin (the first cubin naming a kernel wins) and the
/// first PTX text (for kernels no cubin describes).
struct ImageLayouts {
  fatbin::CubinInfo cubin;
  std::string ptx;
};

/// Collects the layouts of a parsed fatbin (every ELF entry's .nv.info,
/// the first PTX entry's text).
void ReadFatbinLayouts(const fatbin::Fatbin& fb, ImageLayouts* out);

/// The same for any image cuModuleLoadData accepts: a fatbin container, a
/// cubin (ELF) or PTX text. False when the bytes are none of those (the
/// caller still lets phosd judge the image).
bool ReadImageLayouts(std::span<const std::byte> image, ImageLayouts* out);

/// Parses the `.entry <name>(...)` parameter list of PTX text into slots.
/// False if the entry is not found.
bool PtxEntryParams(std::string_view ptx, std::string_view name, std::vector<ParamSlot>* out, uint32_t* bytes);

/// The parameter slots of kernel `name` (mangled): from a cubin's
/// KPARAM_INFO when one describes it, else from the PTX `.entry` list.
/// False when neither knows the kernel.
bool FindParamLayout(const ImageLayouts& layouts, std::string_view name, std::vector<ParamSlot>* params,
                     uint32_t* param_bytes);

/// The bytes of an image that cuModuleLoadData receives as a bare pointer:
/// a fatbin container (its header's size: one container; a fatbin wrapper
/// is followed to its container), a cubin (up to the end of its ELF headers
/// and sections), else NUL-terminated PTX text (the NUL included). The
/// memory is trusted to be readable, as the driver trusts it. Empty for a
/// null pointer or an absurd size.
std::span<const std::byte> ImageInMemory(const void* image);

}  // namespace phos::client
