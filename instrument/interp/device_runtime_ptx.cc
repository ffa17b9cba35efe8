#include "interp/device_runtime_ptx.h"

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "interp/numeric.h"
#include "ptx/ptx_parser.h"

namespace phos::interp {
namespace {

// libcudadevrt's cooperative-groups entry points, as numba-cuda declares
// and calls them (cudaError_t results; scope 1 is cudaCGScopeGrid):
//   u64 cudaCGGetIntrinsicHandle(u32 scope)
//   u32 cudaCGSynchronize(u64 handle, u32 flags)
// A handle is phos's own choice, read only by these bodies: the grid
// workspace a cooperative launch gets in %envreg1 (high) and %envreg2 (low),
// 0 for other scopes and launches. Synchronize is the barrier of CUDA 13's
// cooperative_groups header (details/sync.h, sync_grids_arrive/_wait): the
// workspace's second word counts arrivals, block (0,0,0) adds
// 0x80000000 - (blocks - 1) and the others 1, so the top bit flips when the
// last block arrives. A handle of 0 (not a cooperative launch) traps, as the
// header's grid.sync() faults there on a GPU.
constexpr const char* kDeviceRuntimePtx = R"PTX(
.version 8.0
.target sm_90
.address_size 64

.func (.param .b64 func_retval0) cudaCGGetIntrinsicHandle(.param .b32 scope)
{
  .reg .pred %p<2>;
  .reg .b32 %r<4>;
  .reg .b64 %rd<4>;
  ld.param.u32 %r1, [scope];
  mov.u64 %rd3, 0;
  setp.ne.u32 %p1, %r1, 1;
  @%p1 bra $phos_devrt_handle_done;
  mov.u32 %r2, %envreg1;
  mov.u32 %r3, %envreg2;
  cvt.u64.u32 %rd1, %r2;
  shl.b64 %rd1, %rd1, 32;
  cvt.u64.u32 %rd2, %r3;
  or.b64 %rd3, %rd1, %rd2;
$phos_devrt_handle_done:
  st.param.b64 [func_retval0], %rd3;
  ret;
}

.func (.param .b32 func_retval0) cudaCGSynchronize(.param .b64 handle, .param .b32 flags)
{
  .reg .pred %p<5>;
  .reg .b32 %r<12>;
  .reg .b64 %rd<3>;
  ld.param.u64 %rd1, [handle];
  setp.eq.u64 %p1, %rd1, 0;
  @%p1 trap;
  add.u64 %rd2, %rd1, 4;
  bar.sync 0;
  mov.u32 %r1, %tid.x;
  mov.u32 %r2, %tid.y;
  or.b32 %r1, %r1, %r2;
  mov.u32 %r2, %tid.z;
  or.b32 %r1, %r1, %r2;
  setp.ne.u32 %p2, %r1, 0;
  @%p2 bra $phos_devrt_sync_done;
  mov.u32 %r3, %nctaid.x;
  mov.u32 %r4, %nctaid.y;
  mul.lo.u32 %r3, %r3, %r4;
  mov.u32 %r4, %nctaid.z;
  mul.lo.u32 %r3, %r3, %r4;
  mov.u32 %r5, %ctaid.x;
  mov.u32 %r6, %ctaid.y;
  or.b32 %r5, %r5, %r6;
  mov.u32 %r6, %ctaid.z;
  or.b32 %r5, %r5, %r6;
  mov.u32 %r7, 1;
  setp.ne.u32 %p3, %r5, 0;
  @%p3 bra $phos_devrt_sync_arrive;
  mov.u32 %r7, 0x80000001;
  sub.u32 %r7, %r7, %r3;
$phos_devrt_sync_arrive:
  atom.add.release.gpu.u32 %r8, [%rd2], %r7;
$phos_devrt_sync_spin:
  ld.acquire.gpu.u32 %r9, [%rd2];
  xor.b32 %r9, %r9, %r8;
  and.b32 %r9, %r9, 0x80000000;
  setp.eq.u32 %p4, %r9, 0;
  @%p4 bra $phos_devrt_sync_spin;
$phos_devrt_sync_done:
  bar.sync 0;
  mov.u32 %r10, 0;
  st.param.b32 [func_retval0], %r10;
  ret;
}
)PTX";

const ptx::Module& Definitions() {
  static const ptx::Module* m = [] {
    auto* parsed = new ptx::Module();  // leaked: read by every module load until exit
    const Status s = ptx::ParseModule(kDeviceRuntimePtx, parsed);
    if (!s.ok()) {  // a bug in the text above: every test that loads a module says so
      std::fprintf(stderr, "phos: the interpreter's device runtime PTX does not parse: %s\n", s.ToString().c_str());
      std::abort();
    }
    return parsed;
  }();
  return *m;
}

bool SameShape(const std::vector<ptx::VarDecl>& a, const std::vector<ptx::VarDecl>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].vec != b[i].vec || !a[i].dims.empty() || !b[i].dims.empty() ||
        TypeBytes(a[i].type) != TypeBytes(b[i].type)) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::vector<std::string> SupplyDeviceRuntime(ptx::Module* module) {
  std::vector<std::string> supplied;
  for (ptx::TopItem& item : module->items) {
    auto* f = std::get_if<ptx::Function>(&item);
    if (f == nullptr || f->has_body || f->is_entry) continue;
    const ptx::Function* def = Definitions().FindFunction(f->name);
    if (def == nullptr || !SameShape(f->returns, def->returns) || !SameShape(f->params, def->params)) continue;
    // The definition's parameter names stand in the body; the app's
    // prototype may name them otherwise (its call sites do not care).
    ptx::Function body = *def;
    body.linkage = ptx::Linkage::kNone;
    *f = std::move(body);
    supplied.push_back(f->name);
  }
  return supplied;
}

}  // namespace phos::interp
