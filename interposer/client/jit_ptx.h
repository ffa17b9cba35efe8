// PTX attached to JIT-compiled cubins (docs/interposer.md "JIT-compiled kernels
// keep their PTX").
//
// nvJitLink and NVRTC make SASS-only cubins, which phosd's sim cannot run
// and twin validation cannot check. phos's shims of them (interposer/jit/)
// obtain the PTX of the same code and record the pair here, in the app's
// process, through phosJitAttachPtx. When
// the app later loads that cubin (cuModuleLoadData, cuLibraryLoadData, ...),
// the module phosd receives is a fatbin holding the cubin and its PTX.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

namespace phos::client {

/// Records `ptx` as the source of `cubin` (matched later by content):
/// in memory (the newest entries within a fixed budget) and in the per-user
/// on-disk store ($PHOS_JIT_PTX_CACHE, default ~/.cache/phos/jit-ptx), so
/// a later process that loads the same cubin from a framework's kernel
/// cache finds it too.
void AttachJitPtx(std::span<const std::byte> cubin, std::string_view ptx);

/// When `image` is a cubin with attached PTX (in memory, else in the
/// on-disk store), *out gets a fatbin holding both (cubin first) and the
/// answer is true; otherwise false.
bool ImageWithAttachedPtx(std::span<const std::byte> image, std::vector<std::byte>* out);

}  // namespace phos::client

/// The shim's entry point (found with dlsym, so the shim also loads without
/// libphos.so). Returns 0 when recorded, -1 for a null or empty argument.
extern "C" int phosJitAttachPtx(const void* cubin, size_t cubin_size, const char* ptx, size_t ptx_size);
