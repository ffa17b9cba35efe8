// The twin validator (twin_validator.h).
#include "engine/twin_validator.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "fatbin/fatbin_reader.h"
#include "ptx/ptx_ir.h"
#include "ptx/ptx_parser.h"
#include "twin/twin_abi.h"
#include "twin/twin_cache.h"
#include "twin/twin_pass.h"

namespace phos::engine {
namespace {

constexpr uint32_t kFatbinContainerMagic = 0xBA55ED50u;  // fatbin_format.h
constexpr unsigned char kElfMagic[4] = {0x7f, 'E', 'L', 'F'};

twin::TwinCache& ProcessCache() {
  static twin::TwinCache cache;
  return cache;
}

// The PTX text of a module image: the text itself, or the first PTX entry
// of a fatbin. NotSupported for a cubin or a fatbin without PTX.
Status ExtractPtx(std::span<const std::byte> image, std::string* out) {
  const auto bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(image.data()), image.size());
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), kElfMagic, 4) == 0) {
    return Status::NotSupported("the module is a cubin (no PTX to build a twin from)");
  }
  uint32_t magic = 0;
  if (bytes.size() >= 4) std::memcpy(&magic, bytes.data(), 4);
  if (magic == kFatbinContainerMagic) {
    fatbin::Fatbin fb;
    Status s = fatbin::ParseFatbin(bytes, &fb);
    if (!s.ok()) return Status::NotSupported("unreadable fatbin: " + s.ToString());
    for (const auto& e : fb.entries) {
      if (e.is_ptx()) {
        *out = std::string(e.ptx_text());
        return Status::Ok();
      }
    }
    return Status::NotSupported("the module's fatbin has no PTX entry");
  }
  const auto* text = reinterpret_cast<const char*>(bytes.data());
  std::string ptx(text, strnlen(text, bytes.size()));
  if (ptx.find(".version") == std::string::npos) {
    return Status::NotSupported("the module image is neither a fatbin, a cubin nor PTX text");
  }
  *out = std::move(ptx);
  return Status::Ok();
}

// The .param layout of an .entry: each parameter aligned to its .align or
// its element size (the rule nvcc's parameter tables follow; as
// session/kernel_access.cc's PtxLayout). Fills the appended parameters'
// offsets; InvalidArgument if the entry does not end in the twin ABI's.
Status LayoutOf(const ptx::Function& f, TwinParamLayout* out) {
  const size_t n = f.params.size();
  if (n < 3 || f.params[n - 3].name != twin::kRangesParam || f.params[n - 2].name != twin::kNRangesParam ||
      f.params[n - 1].name != twin::kReportParam) {
    return Status::InvalidArgument("twin entry " + f.name + " does not end in the twin ABI's parameters");
  }
  uint32_t offset = 0;
  std::vector<uint32_t> offsets;
  for (const ptx::VarDecl& d : f.params) {
    const uint32_t elem = static_cast<uint32_t>(std::max(ptx::TypeBits(d.type), 8) / 8) * d.vec;
    uint32_t count = 1;
    for (int64_t dim : d.dims) count *= dim > 0 ? static_cast<uint32_t>(dim) : 1u;
    const uint32_t align = d.align.value_or(elem);
    if (align > 1) offset = (offset + align - 1) / align * align;
    offsets.push_back(offset);
    offset += elem * count;
  }
  out->ranges_offset = offsets[n - 3];
  out->nranges_offset = offsets[n - 2];
  out->report_offset = offsets[n - 1];
  out->total_bytes = offset;
  return Status::Ok();
}

template <typename T>
void Put(std::vector<uint8_t>* block, uint32_t offset, T value) {
  std::memcpy(block->data() + offset, &value, sizeof value);
}

}  // namespace

TwinValidator::TwinValidator(backend::Context* ctx, uint32_t report_capacity, twin::TwinCache* cache,
                             size_t max_slots)
    : ctx_(ctx),
      capacity_(report_capacity),
      cache_(cache != nullptr ? cache : &ProcessCache()),
      max_slots_(std::max<size_t>(max_slots, 1)) {}

TwinValidator::~TwinValidator() {
  // Twins still running write into the slots: wait before freeing them.
  std::deque<Pending> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending.swap(pending_);
  }
  for (Pending& p : pending) {
    if (Status s = ctx_->SynchronizeEvent(p.slot->event); !s.ok()) {
      spdlog::warn("twin validator: twin launch {} failed: {}", p.ticket, s.ToString());
    }
    FreeSlot(p.slot.get());
  }
  for (auto& slot : free_) FreeSlot(slot.get());
  for (auto& [key, t] : twins_) {
    if (!t.loaded) continue;
    if (Status s = ctx_->UnloadModule(t.module); !s.ok()) {
      spdlog::warn("twin validator: unloading the twin of module {}: {}", key.first, s.ToString());
    }
  }
}

void TwinValidator::FreeSlot(Slot* slot) {
  if (slot->event != 0) (void)ctx_->DestroyEvent(slot->event);
  if (slot->dev != 0) (void)ctx_->Free(slot->dev);
}

Status TwinValidator::BuildTwin(const std::vector<std::byte>& image, bool check_reads, LoadedTwin* out) {
  std::string ptx;
  PHOS_RETURN_IF_ERROR(ExtractPtx(image, &ptx));
  twin::TwinOptions opts;
  opts.mode = check_reads ? twin::TwinMode::kReadsAndWrites : twin::TwinMode::kWrites;
  std::shared_ptr<const twin::TwinEntry> entry;
  if (Status s = cache_->GetOrCreate(ptx, opts, &entry); !s.ok()) {
    // The parser or the pass refused the module: no twin, ever.
    return Status::NotSupported("no twin for the module: " + s.ToString());
  }
  // The real offsets of the appended parameters: the twin's .entry lists.
  ptx::Module twin_module;
  PHOS_RETURN_IF_ERROR(ptx::ParseModule(entry->ptx, &twin_module).WithContext("re-parsing a twin module"));
  // A twin module is a module of its own: its __device__ / __constant__ /
  // texture variables would be separate copies, so a twin reading or
  // writing one would not see (or change) the app's. Such modules are not
  // twinned (found by the engine consistency test: a kernel counting into a
  // __device__ counter lost its increments while it ran as its twin).
  for (const ptx::TopItem& item : twin_module.items) {
    const auto* var = std::get_if<ptx::VarDecl>(&item);
    if (var != nullptr && (var->space == ptx::Space::kGlobal || var->space == ptx::Space::kConst ||
                           var->space == ptx::Space::kTex)) {
      return Status::NotSupported("the module has module-scope variable '" + var->name +
                                  "' (a twin would use its own copy)");
    }
  }
  for (ptx::Function* f : twin_module.Kernels()) {
    if (!f->name.ends_with(twin::kTwinSuffix)) continue;
    TwinParamLayout layout;
    PHOS_RETURN_IF_ERROR(LayoutOf(*f, &layout));
    std::string kernel = f->name.substr(0, f->name.size() - twin::kTwinSuffix.size());
    if (auto why = entry->info.UncheckedReason(kernel)) out->unchecked.emplace(kernel, std::move(*why));
    out->layouts.emplace(std::move(kernel), layout);
  }
  // cuModuleLoadData wants NUL-terminated PTX text.
  // The original module loaded, so a refusal is about the twin (a JIT
  // limit, an instruction the sim cannot run): no twin for this module.
  if (Status s = ctx_->LoadModule(entry->ptx.c_str(), entry->ptx.size() + 1, &out->module); !s.ok()) {
    return Status::NotSupported("the backend refused the twin module: " + s.ToString());
  }
  out->loaded = true;
  return Status::Ok();
}

Status TwinValidator::FindTwin(const session::SessionState& st, const session::LaunchArgs& args, bool check_reads,
                               const TwinKernel** out) {
  if (args.kernel == nullptr) return Status::NotSupported("the launch has no kernel name (no access plan)");
  auto img = st.module_images.find(args.module_id);
  if (img == st.module_images.end() || img->second == nullptr) {
    return Status::NotSupported("module " + std::to_string(args.module_id) + " has no image");
  }
  LoadedTwin& t = twins_[{args.module_id, check_reads}];
  if (t.image != img->second) {
    // First use, or the module id now names another image: (re)build.
    if (t.loaded) {
      if (Status s = ctx_->UnloadModule(t.module); !s.ok()) {
        spdlog::warn("twin validator: unloading a stale twin of module {}: {}", args.module_id, s.ToString());
      }
    }
    t = LoadedTwin{};
    t.image = img->second;
    t.status = BuildTwin(*t.image, check_reads, &t);
    if (!t.status.ok()) {
      spdlog::info("twin validator: module {} cannot be validated: {}", args.module_id, t.status.ToString());
    }
  }
  if (!t.status.ok()) return t.status;
  if (auto u = t.unchecked.find(*args.kernel); u != t.unchecked.end()) {
    return Status::NotSupported("kernel " + *args.kernel + " cannot be validated: its twin cannot check " + u->second);
  }
  auto k = t.kernels.find(*args.kernel);
  if (k == t.kernels.end()) {
    auto l = t.layouts.find(*args.kernel);
    if (l == t.layouts.end()) {
      return Status::NotSupported("kernel " + *args.kernel + " is not in its module's PTX");
    }
    TwinKernel tk;
    tk.layout = l->second;
    if (Status s = ctx_->GetFunction(t.module, twin::TwinKernelName(*args.kernel), &tk.function); !s.ok()) {
      return Status::NotSupported("the backend refused the twin of " + *args.kernel + ": " + s.ToString());
    }
    backend::FunctionAttributes a;
    PHOS_RETURN_IF_ERROR(ctx_->GetFunctionAttributes(tk.function, &a));
    tk.max_dynamic_shared = a.max_dynamic_shared_size_bytes;
    k = t.kernels.emplace(*args.kernel, tk).first;
  }
  // The app may have raised the original's dynamic shared memory limit
  // (cudaFuncSetAttribute): the twin needs the same.
  TwinKernel& tk = k->second;
  if (args.shared_bytes > static_cast<unsigned>(std::max(tk.max_dynamic_shared, 0))) {
    const int want = static_cast<int>(args.shared_bytes);
    if (Status s = ctx_->SetFunctionAttribute(tk.function, backend::FunctionAttribute::kMaxDynamicSharedSizeBytes,
                                              want);
        !s.ok()) {
      return Status::NotSupported("the twin of " + *args.kernel + " cannot have " + std::to_string(want) +
                                  " bytes of dynamic shared memory: " + s.ToString());
    }
    tk.max_dynamic_shared = want;
  }
  *out = &tk;
  return Status::Ok();
}

Status TwinValidator::GrowSlot(Slot* slot, size_t nranges) {
  if (slot->dev != 0 && nranges <= slot->range_capacity) return Status::Ok();
  // At least 16 ranges; double to keep regrowth rare.
  size_t cap = std::max<size_t>({nranges, slot->range_capacity * 2, 16});
  backend::DevicePtr dev = 0;
  PHOS_RETURN_IF_ERROR(ctx_->Allocate(twin::ReportBytes(capacity_) + cap * sizeof(twin::Range), 0, &dev));
  if (slot->dev != 0) (void)ctx_->Free(slot->dev);  // idle: its last launch completed
  slot->dev = dev;
  slot->range_capacity = cap;
  return Status::Ok();
}

Status TwinValidator::TakeSlot(size_t nranges, std::unique_ptr<Slot>* out) {
  std::unique_ptr<Slot> slot;
  Pending oldest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      slot = std::move(free_.back());
      free_.pop_back();
    } else if (slots_ < max_slots_ || pending_.empty()) {
      slot = std::make_unique<Slot>();
      ++slots_;
    } else {
      oldest = std::move(pending_.front());
      pending_.pop_front();
    }
  }
  if (slot == nullptr) {
    // Every slot is in flight: wait for the oldest, keep its result for the
    // next Drain and reuse its slot.
    Status error;
    Collected c = Finish(oldest, ctx_->SynchronizeEvent(oldest.slot->event), &error);
    std::lock_guard<std::mutex> lock(mu_);
    harvested_.push_back(std::move(c));
    if (harvest_error_.ok()) harvest_error_ = error;
    slot = std::move(oldest.slot);
  }
  if (slot->event == 0) {
    if (Status s = ctx_->CreateEvent(backend::kEventDisableTiming, &slot->event); !s.ok()) {
      ReleaseSlot(std::move(slot));
      return s;
    }
  }
  if (Status s = GrowSlot(slot.get(), nranges); !s.ok()) {
    ReleaseSlot(std::move(slot));
    return s;
  }
  *out = std::move(slot);
  return Status::Ok();
}

void TwinValidator::ReleaseSlot(std::unique_ptr<Slot> slot) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(std::move(slot));
}

Status TwinValidator::Launch(const session::SessionState& st, const session::LaunchArgs& args,
                             backend::StreamHandle stream, std::span<const session::AccessRange> allowed,
                             bool check_reads, uint64_t* ticket) {
  if (args.params == nullptr) return Status::InvalidArgument("twin launch without a parameter block");
  const TwinKernel* tk = nullptr;
  PHOS_RETURN_IF_ERROR(FindTwin(st, args, check_reads, &tk));
  const TwinParamLayout& layout = tk->layout;
  if (args.params->size() > layout.ranges_offset) {
    return Status::NotSupported("kernel " + *args.kernel + ": the parameter block has " +
                                std::to_string(args.params->size()) + " bytes, its PTX says at most " +
                                std::to_string(layout.ranges_offset));
  }

  std::vector<twin::Range> ranges;
  ranges.reserve(allowed.size());
  for (const session::AccessRange& r : allowed) {
    if (check_reads || r.write) ranges.push_back({r.ptr, r.ptr + r.bytes});
  }

  std::unique_ptr<Slot> slot;
  PHOS_RETURN_IF_ERROR(TakeSlot(ranges.size(), &slot));
  const size_t report_bytes = twin::ReportBytes(capacity_);
  const uint64_t report_dev = slot->dev;
  const uint64_t ranges_dev = slot->dev + report_bytes;

  // Header + ranges in one host buffer. The sim (and a driver copying from
  // pageable memory) reads it when the copy runs, so it lives in the slot
  // until the launch's event completed.
  const size_t ranges_bytes = ranges.size() * sizeof(twin::Range);
  slot->upload.resize(sizeof(twin::ReportHeader) + ranges_bytes);
  slot->report.resize(report_bytes);
  const uint32_t flags = check_reads ? twin::kReportFlagReads : 0u;
  // The header is built in the (idle) read-back buffer, which InitReport
  // wants whole; only the header goes up (records past count are never read).
  Status s = twin::InitReport(slot->report.data(), slot->report.size(), capacity_, args.function_id, flags);
  if (s.ok()) std::memcpy(slot->upload.data(), slot->report.data(), sizeof(twin::ReportHeader));
  if (s.ok() && ranges_bytes != 0) {
    std::memcpy(slot->upload.data() + sizeof(twin::ReportHeader), ranges.data(), ranges_bytes);
  }

  std::vector<uint8_t> block(layout.total_bytes, 0);
  std::memcpy(block.data(), args.params->data(), args.params->size());
  Put<uint64_t>(&block, layout.ranges_offset, ranges_dev);
  Put<uint32_t>(&block, layout.nranges_offset, static_cast<uint32_t>(ranges.size()));
  Put<uint64_t>(&block, layout.report_offset, report_dev);

  const auto host = [](const void* p) { return reinterpret_cast<uint64_t>(p); };
  if (s.ok()) {
    s = ctx_->MemcpyAsync(report_dev, host(slot->upload.data()), sizeof(twin::ReportHeader),
                          backend::CopyKind::kHostToDevice, stream);
  }
  if (s.ok() && ranges_bytes != 0) {
    s = ctx_->MemcpyAsync(ranges_dev, host(slot->upload.data() + sizeof(twin::ReportHeader)), ranges_bytes,
                          backend::CopyKind::kHostToDevice, stream);
  }
  bool launched = false;
  if (s.ok()) {
    s = ctx_->LaunchKernel(tk->function, args.grid, args.block, args.shared_bytes, stream, block);
    launched = s.ok();
    // The twin needs more registers and code than the original: a launch
    // the original would survive may be refused (too many resources). The
    // caller then launches the original, which reports its own errors.
    if (!launched) s = Status::NotSupported("the twin of " + *args.kernel + " was refused: " + s.ToString());
  }
  if (launched) {
    // Errors past the launch lose the report, not the kernel: the launch
    // stays pending and its report reads as lost.
    Status r = ctx_->MemcpyAsync(host(slot->report.data()), report_dev, report_bytes,
                                 backend::CopyKind::kDeviceToHost, stream);
    if (r.ok()) r = ctx_->RecordEvent(slot->event, stream);
    if (!r.ok()) {
      spdlog::warn("twin validator: reading back the report of {}: {}", *args.kernel, r.ToString());
      // The event was not recorded (or recorded before the copy): wait for
      // the stream so the slot is idle before anyone reuses it, then mark
      // the report unreadable (Finish reports it as lost).
      (void)ctx_->SynchronizeStream(stream);
      std::memset(slot->report.data(), 0xFF, slot->report.size());
    }
  } else {
    // Copies already enqueued read slot->upload: let them run first.
    (void)ctx_->SynchronizeStream(stream);
    ReleaseSlot(std::move(slot));
    return s;
  }
  Pending p;
  p.ticket = next_ticket_++;
  p.kernel_id = args.function_id;
  p.slot = std::move(slot);
  *ticket = p.ticket;
  std::lock_guard<std::mutex> lock(mu_);
  pending_.push_back(std::move(p));
  return Status::Ok();
}

TwinValidator::Collected TwinValidator::Finish(const Pending& p, const Status& wait_status, Status* error) const {
  Collected c;
  c.ticket = p.ticket;
  if (!wait_status.ok()) {
    *error = wait_status.WithContext("twin launch " + std::to_string(p.ticket));
    c.dropped = kReportLost;
    return c;
  }
  twin::Report report;
  Status s = twin::DecodeReport(p.slot->report.data(), p.slot->report.size(), &report);
  if (!s.ok() || report.header.capacity != capacity_) {
    // A failed read-back (filled with 0xFF) or a report the kernel trampled.
    if (s.ok()) s = Status::Corruption("report capacity changed under the kernel");
    spdlog::warn("twin validator: report of twin launch {} unreadable: {}", p.ticket, s.ToString());
    c.dropped = kReportLost;
    return c;
  }
  c.dropped = report.dropped;
  c.misses.reserve(report.records.size());
  for (const twin::ReportRecord& r : report.records) {
    c.misses.push_back({r.address, r.is_write != 0, p.kernel_id});
  }
  return c;
}

Status TwinValidator::Drain(bool wait, std::vector<Collected>* out) {
  Status first;
  std::vector<std::pair<Pending, Status>> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Collected& c : harvested_) out->push_back(std::move(c));
    harvested_.clear();
    first = harvest_error_;
    harvest_error_ = Status::Ok();
    if (wait) {
      for (Pending& p : pending_) ready.emplace_back(std::move(p), Status::Ok());
      pending_.clear();
    } else {
      // QueryEvent does not block: fine under the lock.
      for (auto it = pending_.begin(); it != pending_.end();) {
        Status q = ctx_->QueryEvent(it->slot->event);
        if (q.code() == Status::Code::kNotReady) {
          ++it;
          continue;
        }
        ready.emplace_back(std::move(*it), q);
        it = pending_.erase(it);
      }
    }
  }
  for (auto& [p, status] : ready) {
    if (wait) status = ctx_->SynchronizeEvent(p.slot->event);
    Status error;
    out->push_back(Finish(p, status, &error));
    if (first.ok()) first = error;
    ReleaseSlot(std::move(p.slot));
  }
  return first;
}

size_t TwinValidator::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pending_.size() + harvested_.size();
}

}  // namespace phos::engine
