// The C/R engine's twin validator (docs/protocols.md "Access sets (implemented)" "Validation"; docs/instrument.md
// "Twin kernels"): while a checkpoint or restore is in flight, a kernel
// launch whose access set was speculated runs as its twin — the same kernel
// with every global access checked against the speculated ranges, misses
// written to a report buffer (instrument/twin/twin_abi.h) — and the report
// is read back once the kernel ran.
//
// Per launch, on the app's stream, in order:
//   1. H2D upload of the slot's report header (InitReport: count 0) and of
//      the allowed ranges;
//   2. the twin kernel, with the original parameter block followed by
//      __phos_ranges, __phos_nranges, __phos_report at the offsets the twin
//      PTX's .entry parameter list gives (PTX .param alignment rules);
//   3. D2H copy of the report into the slot's host buffer;
//   4. an event recorded after that copy.
// Drain() decodes the reports whose event completed (or waits for them).
//
// Twin modules: the PTX of the launched kernel's module image
// (SessionState::module_images: PTX text, or the first PTX entry of a
// fatbin) goes through a TwinCache (built once per PTX text and mode, by
// default the process-wide one) and is loaded once per (module id, mode)
// into this validator's context; a module id reloaded with another image
// gets its twin rebuilt. A module with no PTX (cubin, SASS-only fatbin), a
// kernel absent from the PTX, or a module the pass refuses gives
// NotSupported (remembered: later launches of it fail fast).
//
// Device slots: one allocation per slot, [report | ranges]; reused across
// launches, grown when a launch has more ranges than the slot holds. At most
// `max_slots` are in flight: a Launch that finds them all busy waits for the
// oldest one (SynchronizeEvent) and keeps its result for the next Drain, so
// a validator never refuses a launch for lack of slots and never grows
// without bound. Slot memory is not in the session's buffer map (it is not
// checkpointed and the app cannot see it).
//
// Threading: Launch() and the destructor on the session's consumer thread
// (they touch `twins_` without a lock). Drain() and pending() from any
// thread, but not once the destructor started. `mu_` guards the free slots, the pending list and the results
// harvested by Launch; it is never held across a blocking backend call
// (SynchronizeEvent) — only across QueryEvent, which does not block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "common/status.h"
#include "session/call_handlers.h"
#include "session/executor.h"

namespace phos::twin {
class TwinCache;
}

namespace phos::engine {

/// One access outside the allowed ranges.
struct TwinAccess {
  uint64_t address = 0;    // first byte of the access
  bool write = false;      // false: a load (check_reads launches only)
  uint32_t kernel_id = 0;  // the launch's LaunchArgs::function_id
};

/// Where the appended parameters of one twin kernel go in its parameter
/// block (byte offsets, from the twin PTX's .entry list).
struct TwinParamLayout {
  uint32_t ranges_offset = 0;   // .u64 __phos_ranges
  uint32_t nranges_offset = 0;  // .u32 __phos_nranges
  uint32_t report_offset = 0;   // .u64 __phos_report
  uint32_t total_bytes = 0;     // end of the last parameter
};

class TwinValidator {
 public:
  static constexpr uint32_t kDefaultReportCapacity = 256;
  static constexpr size_t kDefaultMaxSlots = 64;
  /// Collected::dropped when a report could not be read at all (the twin's
  /// stream failed, the report was corrupt): treat like an overflow.
  static constexpr uint32_t kReportLost = 0xFFFFFFFFu;

  /// `ctx`: the session's context (not owned; must outlive the validator).
  /// `cache`: where twins are built; null = the process-wide cache.
  explicit TwinValidator(backend::Context* ctx, uint32_t report_capacity = kDefaultReportCapacity,
                         twin::TwinCache* cache = nullptr, size_t max_slots = kDefaultMaxSlots);
  /// Waits for pending twins, frees the slots and unloads the twin modules
  /// (the context must still be alive). Consumer thread.
  ~TwinValidator();
  TwinValidator(const TwinValidator&) = delete;
  TwinValidator& operator=(const TwinValidator&) = delete;

  /// Launches the twin of `args` on `stream` instead of the original.
  /// `allowed`: device byte ranges the kernel may access. Without
  /// check_reads only writes are checked and only ranges with write=true are
  /// passed to the twin (a store into a range speculated read-only is a
  /// miss); with check_reads loads are checked too and every range is passed
  /// (one range list: a store into a read-only range is then not a miss).
  /// NotSupported when no twin can be made (no PTX, kernel not in the PTX,
  /// the pass refused the module, a parameter block longer than the PTX
  /// says): the caller applies its --unvalidated policy and launches the
  /// original. Other errors are the backend's (the twin was not launched).
  /// *ticket identifies the launch in Drain's results. Consumer thread.
  Status Launch(const session::SessionState& st, const session::LaunchArgs& args, backend::StreamHandle stream,
                std::span<const session::AccessRange> allowed, bool check_reads, uint64_t* ticket);

  struct Collected {
    uint64_t ticket = 0;
    std::vector<TwinAccess> misses;  // at most report_capacity
    /// Misses not recorded (report overflow), or kReportLost: either way
    /// the caller must assume the kernel may have written anything.
    uint32_t dropped = 0;
    bool overflowed() const { return dropped != 0; }
  };
  /// Appends (ticket, misses) for each twin launch whose report is in:
  /// wait=false collects the launches already complete (QueryEvent);
  /// wait=true waits for every launch pending when it was called. Returns
  /// the first error met (a failed stream: that launch is reported with
  /// dropped = kReportLost); the other launches are still collected.
  Status Drain(bool wait, std::vector<Collected>* out);

  /// Launches whose results Drain has not returned yet.
  size_t pending() const;
  uint32_t report_capacity() const { return capacity_; }
  /// Twin modules loaded into the context (tests).
  size_t loaded_twins() const { return twins_.size(); }

 private:
  struct Slot {
    backend::DevicePtr dev = 0;  // [report: ReportBytes(capacity) | ranges]
    size_t range_capacity = 0;   // Range records the slot holds
    backend::EventHandle event = 0;
    std::vector<std::byte> upload;  // header + ranges; read by the H2D copy when it runs
    std::vector<std::byte> report;  // filled by the D2H copy
  };
  struct Pending {
    uint64_t ticket = 0;
    uint32_t kernel_id = 0;
    std::unique_ptr<Slot> slot;
  };
  // One kernel of a loaded twin module.
  struct TwinKernel {
    backend::FunctionHandle function = 0;
    TwinParamLayout layout;
    int max_dynamic_shared = 0;  // the twin function's current limit
  };
  // The twin of one module (id, mode) in this context. `status` not OK:
  // no twin can be made (remembered so later launches fail fast).
  struct LoadedTwin {
    std::shared_ptr<const std::vector<std::byte>> image;  // what it was built from
    Status status;
    backend::ModuleHandle module = 0;
    bool loaded = false;
    std::map<std::string, TwinParamLayout, std::less<>> layouts;  // by original kernel name
    // Kernels the twin cannot fully check (twin_pass.h "unchecked"), with
    // the reason: their launches get NotSupported, as a kernel without PTX.
    std::map<std::string, std::string, std::less<>> unchecked;
    std::unordered_map<std::string, TwinKernel> kernels;           // resolved on first launch
  };

  // The twin kernel for `args` (building/loading its module on first use).
  Status FindTwin(const session::SessionState& st, const session::LaunchArgs& args, bool check_reads,
                  const TwinKernel** out);
  Status BuildTwin(const std::vector<std::byte>& image, bool check_reads, LoadedTwin* out);
  // A free slot able to hold `nranges` ranges (may wait for the oldest
  // pending launch when max_slots are in flight).
  Status TakeSlot(size_t nranges, std::unique_ptr<Slot>* out);
  Status GrowSlot(Slot* slot, size_t nranges);
  void ReleaseSlot(std::unique_ptr<Slot> slot);
  void FreeSlot(Slot* slot);
  // Decodes a pending launch's report (`wait_status`: its event's status).
  Collected Finish(const Pending& p, const Status& wait_status, Status* error) const;

  backend::Context* const ctx_;
  const uint32_t capacity_;
  twin::TwinCache* const cache_;
  const size_t max_slots_;

  // Consumer thread only.
  std::map<std::pair<uint32_t, bool>, LoadedTwin> twins_;  // (module id, check_reads)
  uint64_t next_ticket_ = 1;

  mutable std::mutex mu_;  // guards the members below
  std::vector<std::unique_ptr<Slot>> free_;
  std::deque<Pending> pending_;         // launched, report not collected, oldest first
  std::vector<Collected> harvested_;    // collected by TakeSlot, returned by the next Drain
  Status harvest_error_;                // first error met while harvesting
  size_t slots_ = 0;                    // slots allocated (free + pending)
};

}  // namespace phos::engine
