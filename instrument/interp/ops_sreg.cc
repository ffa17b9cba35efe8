// Special registers (%tid, %ctaid, %laneid, %clock, %lanemask_*, ...).
#include <chrono>

#include "interp/exec.h"

namespace phos::interp {

uint64_t ReadSreg(Exec& x, uint32_t id) {
  const Block& b = *x.b;
  const Thread& t = *x.t;
  const uint32_t lane = t.lane;
  switch (id) {
    case kTidX: return t.tid[0];
    case kTidY: return t.tid[1];
    case kTidZ: return t.tid[2];
    case kNtidX: return b.ntid[0];
    case kNtidY: return b.ntid[1];
    case kNtidZ: return b.ntid[2];
    case kCtaidX: return b.ctaid[0];
    case kCtaidY: return b.ctaid[1];
    case kCtaidZ: return b.ctaid[2];
    case kNctaidX: return b.nctaid[0];
    case kNctaidY: return b.nctaid[1];
    case kNctaidZ: return b.nctaid[2];
    case kLaneid: return lane;
    case kWarpid: return t.warp;
    case kNwarpid: return b.nwarps;
    case kSmid: return b.smid;
    case kNsmid: return 1024;
    case kGridid: return 1;
    case kClock: return t.icount() & 0xFFFFFFFFu;
    case kClockHi: return t.icount() >> 32;
    case kClock64: return t.icount();
    case kGlobaltimer: case kGlobaltimerLo: case kGlobaltimerHi: {
      const uint64_t ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::system_clock::now().time_since_epoch()).count());
      return id == kGlobaltimer ? ns : id == kGlobaltimerLo ? (ns & 0xFFFFFFFFu) : (ns >> 32);
    }
    case kLanemaskEq: return 1u << lane;
    case kLanemaskLt: return (1u << lane) - 1;
    case kLanemaskLe: return lane == 31 ? 0xFFFFFFFFu : (2u << lane) - 1;
    case kLanemaskGt: return lane == 31 ? 0u : ~((2u << lane) - 1) & 0xFFFFFFFFu;
    case kLanemaskGe: return ~((1u << lane) - 1) & 0xFFFFFFFFu;
    case kDynamicSmemSize: return b.dyn_smem;
    case kTotalSmemSize: return b.shared.size();
    case kWarpSz: return 32;
    case kEnvreg0 + 1: return b.opts->grid_workspace >> 32;
    case kEnvreg0 + 2: return b.opts->grid_workspace & 0xFFFFFFFFu;
    default: return 0;  // the other %envreg: 0, as the driver leaves them
  }
}

}  // namespace phos::interp
