// Function attributes on the sim (SimModule::KernelAttributes) and the
// dynamic shared memory limit a launch must respect.
#include <cstring>

#include "sim_test_util.h"

namespace phos::backend::sim_test {
namespace {

// `attrs` declares everything an attribute is derived from; `dyn` writes
// its dynamic shared memory and copies it out, so a launch proves the
// memory is there.
constexpr char kAttributesPtx[] = R"PTX(
.version 8.0
.target sm_80
.address_size 64

.const .align 4 .b8 table[256];
.const .align 8 .u64 scale;
.shared .align 4 .b8 tile[1024];
.extern .shared .align 16 .b8 dyn[];

.visible .entry attrs(.param .u64 out)
.maxntid 128, 1, 1
.maxnreg 64
{
    .local .align 4 .b8 __local_depot0[40];
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [out];
    mov.u64 %rd2, tile;
    ret;
}

.visible .entry dyn_copy(.param .u64 out, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [n];
    mov.u64 %rd7, tile;
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %ntid.x;
LOOP:
    setp.ge.u32 %p1, %r2, %r1;
    @%p1 bra DONE;
    cvt.u64.u32 %rd2, %r2;
    mov.u64 %rd3, dyn;
    add.s64 %rd4, %rd3, %rd2;
    st.shared.u8 [%rd4], %r2;
    ld.shared.u8 %r4, [%rd4];
    cvta.to.global.u64 %rd5, %rd1;
    add.s64 %rd6, %rd5, %rd2;
    st.global.u8 [%rd6], %r4;
    add.u32 %r2, %r2, %r3;
    bra LOOP;
DONE:
    ret;
}
)PTX";

struct Loaded {
  SimFixture f;
  ModuleHandle module = 0;
  Status Init() {
    PHOS_RETURN_IF_ERROR(f.Init());
    return f.ctx->LoadModule(kAttributesPtx, sizeof kAttributesPtx, &module);
  }
};

TEST(SimFunctionAttributes, DerivedFromThePtx) {
  Loaded l;
  SIM_ASSERT_OK(l.Init());
  FunctionHandle fn = 0;
  SIM_ASSERT_OK(l.f.ctx->GetFunction(l.module, "attrs", &fn));
  FunctionAttributes a;
  SIM_ASSERT_OK(l.f.ctx->GetFunctionAttributes(fn, &a));
  EXPECT_EQ(a.max_threads_per_block, 128);  // .maxntid
  EXPECT_EQ(a.num_regs, 64);                // .maxnreg (no cubin in a PTX image)
  EXPECT_EQ(a.shared_size_bytes, 1024u);    // `tile`, which it names; the extern `dyn` is dynamic
  EXPECT_EQ(a.const_size_bytes, 264u);      // table + scale
  EXPECT_EQ(a.local_size_bytes, 48u);       // the 40-byte depot, in 16-byte units
  EXPECT_EQ(a.ptx_version, 80);             // .target sm_80
  EXPECT_EQ(a.binary_version, 80);          // no cubin: the PTX target
  EXPECT_EQ(a.max_dynamic_shared_size_bytes, 48 * 1024 - 1024);
  EXPECT_EQ(a.preferred_shared_memory_carveout, -1);

  FunctionHandle plain = 0;
  SIM_ASSERT_OK(l.f.ctx->GetFunction(l.module, "dyn_copy", &plain));
  SIM_ASSERT_OK(l.f.ctx->GetFunctionAttributes(plain, &a));
  EXPECT_EQ(a.max_threads_per_block, 1024);
  EXPECT_EQ(a.num_regs, 32);  // SimModule::kModelledRegisters: PTX only, no .maxnreg
  SIM_EXPECT_CODE(l.f.ctx->GetFunctionAttributes(fn + 1000, &a), kInvalidArgument);
}

TEST(SimFunctionAttributes, SetAttributeValidatesAndSticks) {
  Loaded l;
  SIM_ASSERT_OK(l.Init());
  FunctionHandle fn = 0;
  SIM_ASSERT_OK(l.f.ctx->GetFunction(l.module, "dyn_copy", &fn));
  SIM_ASSERT_OK(l.f.ctx->SetFunctionAttribute(fn, FunctionAttribute::kPreferredSharedMemoryCarveout, 50));
  SIM_EXPECT_CODE(l.f.ctx->SetFunctionAttribute(fn, FunctionAttribute::kPreferredSharedMemoryCarveout, 101),
                  kInvalidArgument);
  // 227 KiB opt-in minus 1 KiB of the module's static shared memory.
  SIM_EXPECT_CODE(l.f.ctx->SetFunctionAttribute(fn, FunctionAttribute::kMaxDynamicSharedSizeBytes, 226 * 1024 + 1),
                  kInvalidArgument);
  SIM_ASSERT_OK(l.f.ctx->SetFunctionAttribute(fn, FunctionAttribute::kMaxDynamicSharedSizeBytes, 226 * 1024));
  FunctionAttributes a;
  SIM_ASSERT_OK(l.f.ctx->GetFunctionAttributes(fn, &a));
  EXPECT_EQ(a.preferred_shared_memory_carveout, 50);
  EXPECT_EQ(a.max_dynamic_shared_size_bytes, 226 * 1024);
}

TEST(SimFunctionAttributes, DynamicSharedAbove48KiBNeedsTheAttribute) {
  Loaded l;
  SIM_ASSERT_OK(l.Init());
  FunctionHandle fn = 0;
  SIM_ASSERT_OK(l.f.ctx->GetFunction(l.module, "dyn_copy", &fn));
  const std::uint32_t n = 64 * 1024;
  DevicePtr out = 0;
  SIM_ASSERT_OK(l.f.ctx->Allocate(n, 0, &out));
  auto params_for = [&](std::uint32_t bytes) {
    std::vector<std::uint8_t> p(12);
    std::memcpy(p.data(), &out, 8);
    std::memcpy(p.data() + 8, &bytes, 4);
    return p;
  };
  const std::vector<std::uint8_t> params = params_for(n);
  // Default limit: 48 KiB - 1 KiB static.
  SIM_ASSERT_OK(
      l.f.ctx->LaunchKernel(fn, Dim3{1, 1, 1}, Dim3{256, 1, 1}, 47 * 1024, kDefaultStream, params_for(47 * 1024)));
  SIM_EXPECT_CODE(l.f.ctx->LaunchKernel(fn, Dim3{1, 1, 1}, Dim3{256, 1, 1}, 47 * 1024 + 1, kDefaultStream,
                                        params_for(47 * 1024 + 1)),
                  kInvalidArgument);
  SIM_ASSERT_OK(l.f.ctx->Synchronize());
  SIM_ASSERT_OK(l.f.ctx->SetFunctionAttribute(fn, FunctionAttribute::kMaxDynamicSharedSizeBytes, n));
  SIM_ASSERT_OK(l.f.ctx->LaunchKernel(fn, Dim3{1, 1, 1}, Dim3{256, 1, 1}, n, kDefaultStream, params));
  std::vector<std::uint8_t> host(n);
  SIM_ASSERT_OK(l.f.ctx->MemcpyAsync(H(host.data()), out, n, CopyKind::kDeviceToHost, kDefaultStream));
  SIM_ASSERT_OK(l.f.ctx->Synchronize());
  for (std::uint32_t i = 0; i < n; ++i) ASSERT_EQ(host[i], static_cast<std::uint8_t>(i)) << "byte " << i;
}

}  // namespace
}  // namespace phos::backend::sim_test
