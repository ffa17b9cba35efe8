// libFuzzer target for the PTX interpreter (issue #16): whatever parses and
// decodes must run — or be refused — without crashing, hanging or touching
// memory it was not given. Each entry of the module runs as one small
// launch: grid 2, block 33 (a partial second warp), every 8-byte parameter
// slot holding the address of one registered 4 KiB buffer (so kernels that
// load a pointer reach real device memory; anything else is an illegal
// address, which must come back as an error), each thread bounded to a few
// thousand instructions, device printf into a small FIFO. A failed launch
// is fine; a crash, a sanitizer report or a hang is the bug.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "interp/device_output.h"
#include "interp/launch.h"
#include "interp/program.h"
#include "ptx/ptx_parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace phos;
  if (size > 64 * 1024) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ptx::Module m;
  if (!ptx::ParseModule(text, &m).ok()) return 0;
  std::unique_ptr<interp::Program> prog;
  if (!interp::Program::Build(m, &prog).ok()) return 0;
  static std::vector<uint8_t> device(4096 + 64);
  std::memset(device.data(), 0x5a, device.size());
  interp::RangeGlobalMemory memory;
  memory.AddRange(device.data(), 4096);
  interp::DeviceOutput output(4096);
  interp::LaunchOptions options;
  options.workers = 1;
  options.max_instructions_per_thread = 4000;
  options.device_output = &output;
  int launched = 0;
  for (size_t i = 0; i < prog->num_functions() && launched < 4; ++i) {
    const interp::Function& f = prog->function(static_cast<int>(i));
    if (!f.is_entry || f.param_size > 4096) continue;
    ++launched;
    std::vector<uint8_t> params(f.param_size + 8, 0);
    const uint64_t addr = reinterpret_cast<uint64_t>(device.data());
    for (size_t off = 0; off + 8 <= params.size(); off += 8) std::memcpy(params.data() + off, &addr, 8);
    (void)interp::LaunchKernel(*prog, f.name, {2, 1, 1}, {33, 1, 1}, 64, params.data(), f.param_size, &memory,
                               options);
  }
  return 0;
}
