// The NVRTC shim's options for the PTX compile: a real architecture made
// virtual, in every spelling NVRTC accepts; nothing to do without one.
#include "nvrtc_options.h"

#include <gtest/gtest.h>

namespace phos::jit {
namespace {

using Options = std::vector<std::string>;

TEST(NvrtcOptions, RealArchitecturesBecomeVirtual) {
  EXPECT_EQ(OptionsForPtx({"-arch=sm_90"}), Options({"-arch=compute_90"}));
  EXPECT_EQ(OptionsForPtx({"--gpu-architecture=sm_90a", "-std=c++17"}),
            Options({"--gpu-architecture=compute_90a", "-std=c++17"}));
  EXPECT_EQ(OptionsForPtx({"-default-device", "-arch", "sm_100f"}),
            Options({"-default-device", "-arch", "compute_100f"}));
  EXPECT_EQ(OptionsForPtx({"--gpu-architecture", "sm_120", "-lineinfo"}),
            Options({"--gpu-architecture", "compute_120", "-lineinfo"}));
}

TEST(NvrtcOptions, NothingToDoWithoutARealArchitecture) {
  EXPECT_EQ(OptionsForPtx({}), std::nullopt);                          // NVRTC's default is virtual
  EXPECT_EQ(OptionsForPtx({"-arch=compute_90"}), std::nullopt);
  EXPECT_EQ(OptionsForPtx({"-arch"}), std::nullopt);                   // a dangling flag is left alone
  EXPECT_EQ(OptionsForPtx({"-architecture=sm_90"}), std::nullopt);     // not an NVRTC option
  EXPECT_EQ(OptionsForPtx({"-arch=sm_"}), std::nullopt);
}

}  // namespace
}  // namespace phos::jit
