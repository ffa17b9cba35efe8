#include "workload.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <span>
#include <thread>

#include "fake_app.h"
#include "ring/waiter.h"
#include "test_ptx.h"

namespace phos::engine::testing {

using session::testing::FakeApp;
using wire::WireStatus;

const char* OpName(Op op) {
  switch (op) {
    case Op::kModuleLoad: return "ModuleLoad";
    case Op::kGetFunction: return "GetFunction";
    case Op::kGetGlobal: return "GetGlobal";
    case Op::kStreamCreate: return "StreamCreate";
    case Op::kEventCreate: return "EventCreate";
    case Op::kMalloc: return "Malloc";
    case Op::kFree: return "Free";
    case Op::kFreeAsync: return "FreeAsync";
    case Op::kShareSegment: return "ShareSegment";
    case Op::kHostFunc: return "HostFunc";
    case Op::kGemm: return "Gemm";
    case Op::kH2D: return "H2D";
    case Op::kMemset: return "Memset";
    case Op::kD2D: return "D2D";
    case Op::kLaunch: return "Launch";
    case Op::kStreamSync: return "StreamSync";
    case Op::kDeviceSync: return "DeviceSync";
    case Op::kEventRecord: return "EventRecord";
    case Op::kStreamWaitEvent: return "StreamWaitEvent";
  }
  return "?";
}

const char* KernelName(Kernel k) {
  switch (k) {
    case Kernel::kPtxSaxpy: return "saxpy";
    case Kernel::kPtxBump: return "bump";
    case Kernel::kVectorAdd: return "_Z10vector_addPKfS0_Pfi";
    case Kernel::kSaxpy: return "_Z5saxpyfPKfPfi";
    case Kernel::kTransform: return "_Z9transformPKjPjij";
  }
  return "?";
}

namespace {

// splitmix64: small, fast, and the same everywhere (std:: distributions are
// not specified bit-exactly across standard libraries).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t Next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  /// Uniform in [lo, hi] (hi >= lo).
  std::uint64_t Range(std::uint64_t lo, std::uint64_t hi) { return lo + Next() % (hi - lo + 1); }
  bool Chance(int percent) { return static_cast<int>(Next() % 100) < percent; }
  /// Log-uniform in [lo, hi].
  std::uint64_t LogRange(std::uint64_t lo, std::uint64_t hi) {
    int bits_lo = 63 - __builtin_clzll(lo), bits_hi = 63 - __builtin_clzll(hi);
    const int b = static_cast<int>(Range(bits_lo, bits_hi));
    const std::uint64_t v = Range(std::uint64_t{1} << b, (std::uint64_t{2} << b) - 1);
    return std::clamp(v, lo, hi);
  }

 private:
  std::uint64_t state_;
};

std::string Hex(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

// Generation state: which allocation is live, which stream owns it and
// whether work on it may still be pending (see workload.h).
Step Of(Op op) {
  Step s;
  s.op = op;
  return s;
}
template <typename F>
Step With(Step s, F&& set) {
  set(s);
  return s;
}

class Generator {
 public:
  explicit Generator(const WorkloadOptions& o) : o_(o), rng_(o.seed ^ 0x5eedc0ffee123457ull) {
    o_.streams = std::clamp(o_.streams, 2, 4);
    o_.events = std::max(o_.events, 1);
    o_.buffers = std::max(o_.buffers, 2);
    o_.min_bytes = std::max<std::uint64_t>(o_.min_bytes, 64);
    o_.max_bytes = std::max(o_.max_bytes, o_.min_bytes);
    // One H2D step must fit one ring frame (inline, one admitted call).
    o_.max_copy_bytes = std::clamp<std::uint64_t>(o_.max_copy_bytes, 64, 192u << 10);
    o_.max_kernel_elements = std::max<std::uint32_t>(o_.max_kernel_elements, 1);
    w_.options = o_;
  }

  Workload Run() {
    Setup();
    for (int i = 0; i < o_.steps; ++i) RandomStep();
    // End on a clean point: the final state is the state after every call.
    Emit(Of(Op::kDeviceSync));
    return std::move(w_);
  }

 private:
  struct Alloc {
    std::uint64_t bytes = 0;
    std::uint32_t owner = 1;
    bool pending = false;  // async work on it may not have completed
  };

  void Emit(Step s) { w_.steps.push_back(s); }

  std::uint32_t RandomStream() { return static_cast<std::uint32_t>(rng_.Range(1, o_.streams)); }

  void Setup() {
    Emit(Of(Op::kShareSegment));  // host functions' gate words live there
    // Modules and functions. Function ids: 1 ptx saxpy, 2 bump, 3.. app kernels.
    Emit(With(Of(Op::kModuleLoad), [&](Step& x) { x.id = 1; x.module = Module::kPtx; }));
    Emit(With(Of(Op::kGetFunction), [&](Step& x) { x.id = 1; x.module_id = 1; x.kernel = Kernel::kPtxSaxpy; }));
    Emit(With(Of(Op::kGetFunction), [&](Step& x) { x.id = 2; x.module_id = 1; x.kernel = Kernel::kPtxBump; }));
    Emit(With(Of(Op::kGetGlobal), [&](Step& x) { x.module_id = 1; }));
    w_.uses_global = true;
    kernels_ = {{Kernel::kPtxSaxpy, 1}};
    if (o_.global_kernel) kernels_.push_back({Kernel::kPtxBump, 2});
    if (o_.app_kernels) {
      const struct {
        Module m;
        Kernel k;
      } apps[] = {{Module::kVectorAdd, Kernel::kVectorAdd},
                  {Module::kSaxpyLoop, Kernel::kSaxpy},
                  {Module::kMultiStream, Kernel::kTransform}};
      std::uint32_t id = 2;
      for (const auto& a : apps) {
        ++id;
        Emit(With(Of(Op::kModuleLoad), [&](Step& x) { x.id = id; x.module = a.m; }));
        Emit(With(Of(Op::kGetFunction), [&](Step& x) { x.id = id; x.module_id = id; x.kernel = a.k; }));
        kernels_.push_back({a.k, id});
      }
    }
    for (std::uint32_t s = 1; s <= static_cast<std::uint32_t>(o_.streams); ++s) {
      Emit(With(Of(Op::kStreamCreate), [&](Step& x) { x.id = s; }));
    }
    for (std::uint32_t e = 1; e <= static_cast<std::uint32_t>(o_.events); ++e) {
      Emit(With(Of(Op::kEventCreate), [&](Step& x) { x.id = e; }));
    }
    for (int b = 0; b < o_.buffers; ++b) slots_.push_back(NewAlloc());
    // Initialise every buffer with H2D copies (pieces of one frame each).
    for (int a : slots_) {
      const std::uint64_t bytes = allocs_[a].bytes;
      for (std::uint64_t off = 0; off < bytes; off += o_.max_copy_bytes) {
        H2D(a, off, std::min<std::uint64_t>(o_.max_copy_bytes, bytes - off), allocs_[a].owner);
      }
    }
    w_.setup_steps = w_.steps.size();
  }

  // Malloc + a whole-buffer memset (a fresh allocation's content is
  // undefined on a GPU; the sim's is zero).
  int NewAlloc() {
    const int a = static_cast<int>(allocs_.size());
    Alloc al;
    al.bytes = rng_.LogRange(o_.min_bytes, o_.max_bytes) & ~std::uint64_t{15};
    al.bytes = std::max<std::uint64_t>(al.bytes, 64);
    al.owner = RandomStream();
    allocs_.push_back(al);
    w_.alloc_bytes.push_back(al.bytes);
    Emit(With(Of(Op::kMalloc), [&](Step& x) { x.dst = {a, 0}; x.bytes = al.bytes; }));
    Step m = With(Of(Op::kMemset), [&](Step& x) { x.stream = al.owner; x.dst = {a, 0}; x.bytes = al.bytes; });
    m.value = static_cast<std::uint32_t>(rng_.Next());
    m.element_size = 1;
    m.sync = rng_.Chance(30);
    EmitOnStream(m, {a});
    return a;
  }

  // Makes `alloc` owned by `stream`: an event hand-over when work on it
  // may be pending on its old owner.
  void Own(int alloc, std::uint32_t stream) {
    Alloc& a = allocs_[alloc];
    if (a.owner == stream) return;
    if (a.pending) {
      const auto ev = static_cast<std::uint32_t>(1 + (next_event_++ % o_.events));
      Emit(With(Of(Op::kEventRecord), [&](Step& x) { x.stream = a.owner; x.id = ev; }));
      Emit(With(Of(Op::kStreamWaitEvent), [&](Step& x) { x.stream = stream; x.id = ev; }));
    }
    a.owner = stream;
  }

  // Emits a call on s.stream touching `allocs`: hands them over first,
  // then tracks what is pending.
  void EmitOnStream(const Step& s, std::initializer_list<int> allocs) {
    for (int a : allocs) Own(a, s.stream);
    Emit(s);
    if (s.sync) {
      SyncedStream(s.stream);
    } else {
      for (int a : allocs) allocs_[a].pending = true;
    }
  }

  void SyncedStream(std::uint32_t stream) {
    for (int a : slots_) {
      if (allocs_[a].owner == stream) allocs_[a].pending = false;
    }
  }
  void SyncedDevice() {
    for (int a : slots_) allocs_[a].pending = false;
  }

  // The stream a call on `alloc` runs on: usually its owner, sometimes
  // another one (a hand-over).
  std::uint32_t PickStream(int alloc) {
    return rng_.Chance(70) ? allocs_[alloc].owner : RandomStream();
  }

  int RandomLive() { return slots_[rng_.Range(0, slots_.size() - 1)]; }

  void H2D(int a, std::uint64_t off, std::uint64_t bytes, std::uint32_t stream) {
    Step s = With(Of(Op::kH2D), [&](Step& x) { x.stream = stream; x.dst = {a, off}; x.bytes = bytes; });
    s.data_seed = rng_.Next();
    s.sync = rng_.Chance(30);
    EmitOnStream(s, {a});
  }

  // A random range of allocation `a`: [off, off + len), len <= cap, aligned to `align`.
  void RandomRange(int a, std::uint64_t cap, std::uint64_t align, std::uint64_t* off, std::uint64_t* len) {
    const std::uint64_t bytes = allocs_[a].bytes;
    const std::uint64_t max_len = std::min(cap, bytes) / align * align;
    *len = rng_.Range(1, max_len / align) * align;
    *off = rng_.Range(0, (bytes - *len) / align) * align;
  }

  void RandomStep() {
    const int r = static_cast<int>(rng_.Range(0, 99));
    if (r < 15) {  // H2D
      const int a = RandomLive();
      std::uint64_t off, len;
      RandomRange(a, o_.max_copy_bytes, 1, &off, &len);
      H2D(a, off, len, PickStream(a));
    } else if (r < 27) {  // memset
      const int a = RandomLive();
      Step s = With(Of(Op::kMemset), [&](Step& x) { x.stream = PickStream(a); });
      s.element_size = 1u << rng_.Range(0, 2);
      std::uint64_t off, len;
      RandomRange(a, o_.max_copy_bytes, s.element_size, &off, &len);
      s.dst = {a, off};
      s.bytes = len;
      s.value = static_cast<std::uint32_t>(rng_.Next());
      s.sync = rng_.Chance(25);
      EmitOnStream(s, {a});
    } else if (r < 39) {  // D2D between two different buffers
      const int dst = RandomLive();
      int src = RandomLive();
      if (src == dst) return;
      const std::uint64_t cap = std::min({o_.max_copy_bytes, allocs_[dst].bytes, allocs_[src].bytes});
      Step s = With(Of(Op::kD2D), [&](Step& x) { x.stream = PickStream(dst); });
      s.bytes = rng_.Range(1, cap);
      s.dst = {dst, rng_.Range(0, allocs_[dst].bytes - s.bytes)};
      s.src = {src, rng_.Range(0, allocs_[src].bytes - s.bytes)};
      s.sync = rng_.Chance(25);
      EmitOnStream(s, {dst, src});
    } else if (r < 75) {
      if (o_.gemm && rng_.Chance(o_.gemm_percent)) {
        Gemm();
      } else {
        Launch();
      }
    } else if (r < 82) {
      const std::uint32_t st = RandomStream();
      Emit(With(Of(Op::kStreamSync), [&](Step& x) { x.stream = st; }));
      SyncedStream(st);
    } else if (r < 84) {
      Emit(Of(Op::kDeviceSync));
      SyncedDevice();
    } else if (r < 90 && rng_.Chance(30)) {  // a host function in stream order
      Emit(With(Of(Op::kHostFunc), [&](Step& x) { x.stream = RandomStream(); }));
    } else if (r < 90) {  // an ordering without a buffer hand-over
      const std::uint32_t from = RandomStream(), to = RandomStream();
      const auto ev = static_cast<std::uint32_t>(1 + (next_event_++ % o_.events));
      Emit(With(Of(Op::kEventRecord), [&](Step& x) { x.stream = from; x.id = ev; }));
      Emit(With(Of(Op::kStreamWaitEvent), [&](Step& x) { x.stream = to; x.id = ev; }));
    } else if (r < 94) {  // free one buffer, allocate another in its slot
      const std::size_t slot = rng_.Range(0, slots_.size() - 1);
      const int a = slots_[slot];
      if (rng_.Chance(50)) {
        // cudaFreeAsync on the buffer's owner: every call on it is ordered
        // before the free (ownership), nothing waits.
        Emit(With(Of(Op::kFreeAsync), [&](Step& x) { x.dst = {a, 0}; x.stream = allocs_[a].owner; }));
      } else {
        Emit(With(Of(Op::kFree), [&](Step& x) { x.dst = {a, 0}; }));
        SyncedDevice();  // cudaFree synchronises the device
      }
      slots_[slot] = NewAlloc();
    } else {  // a burst of small H2D copies on one stream
      const std::uint32_t st = RandomStream();
      const int n = static_cast<int>(rng_.Range(2, 5));
      for (int i = 0; i < n; ++i) {
        const int a = RandomLive();
        std::uint64_t off, len;
        RandomRange(a, 256, 1, &off, &len);
        H2D(a, off, len, st);
      }
    }
  }

  // An operand of `alloc` for a kernel: a 4-byte aligned offset into it.
  Operand KernelOperand(int alloc) {
    const std::uint64_t words = allocs_[alloc].bytes / 4;
    const std::uint64_t off = rng_.Chance(60) ? 0 : rng_.Range(0, words / 2) * 4;
    return {alloc, off};
  }
  std::uint64_t Words(const Operand& o) { return (allocs_[o.alloc].bytes - o.offset) / 4; }

  // A float GEMM on three different buffers: C (written) and A, B (read;
  // A and B may be one buffer). Sizes fit the buffers; scalars exactly
  // representable.
  void Gemm() {
    const int c = RandomLive();
    int a = -1, b = -1;
    for (int tries = 0; tries < 8 && (a < 0 || b < 0); ++tries) {
      const int x = RandomLive();
      if (x == c) continue;
      if (a < 0) a = x;
      else b = x;
    }
    if (a < 0) return;
    if (b < 0) b = a;
    Step s = With(Of(Op::kGemm), [&](Step& x) { x.stream = PickStream(c); });
    s.dst = {c, 0};
    s.src = {a, 0};
    s.src2 = {b, 0};
    auto dim = [&] { return static_cast<std::uint32_t>(rng_.Range(1, 16)); };
    s.m = dim();
    s.n = dim();
    s.k = dim();
    // Shrink until every matrix fits its buffer (1 x 1 always does).
    auto fits = [&] {
      return std::uint64_t{s.m} * s.n * 4 <= allocs_[c].bytes && std::uint64_t{s.m} * s.k * 4 <= allocs_[a].bytes &&
             std::uint64_t{s.k} * s.n * 4 <= allocs_[b].bytes;
    };
    while (!fits()) {
      s.m = std::max(1u, s.m / 2);
      s.n = std::max(1u, s.n / 2);
      s.k = std::max(1u, s.k / 2);
    }
    s.trans = static_cast<std::uint32_t>(rng_.Range(0, 3));
    s.scalar = 0.5f + 0.25f * static_cast<float>(rng_.Range(0, 3));
    s.beta = rng_.Chance(30) ? 0.0f : 0.5f;
    EmitOnStream(s, {c, a, b});
  }

  void Launch() {
    const auto& [kernel, fid] = kernels_[rng_.Range(0, kernels_.size() - 1)];
    Step s = With(Of(Op::kLaunch), [&](Step& x) { x.id = fid; x.kernel = kernel; });
    if (kernel == Kernel::kPtxBump) {
      // The global is only ever touched by bump, always on stream 1.
      s.stream = 1;
      Emit(s);
      return;
    }
    const int out = RandomLive();
    s.stream = PickStream(out);
    s.dst = KernelOperand(out);
    // Inputs: another buffer, or exactly the output operand (an element-wise
    // kernel reading and writing the same element is race-free).
    auto input = [&]() -> Operand {
      if (rng_.Chance(20)) return s.dst;
      for (int tries = 0; tries < 4; ++tries) {
        const int a = RandomLive();
        if (a != out) return KernelOperand(a);
      }
      return s.dst;
    };
    s.src = input();
    const bool two_inputs = kernel == Kernel::kVectorAdd;
    if (two_inputs) s.src2 = input();
    std::uint64_t n = std::min<std::uint64_t>(Words(s.dst), Words(s.src));
    if (two_inputs) n = std::min(n, Words(s.src2));
    n = std::min<std::uint64_t>(n, o_.max_kernel_elements);
    s.n = static_cast<std::uint32_t>(rng_.Range(1, std::max<std::uint64_t>(n, 1)));
    s.block = rng_.Chance(50) ? 128 : 256;
    s.grid = (s.n + s.block - 1) / s.block;
    s.salt = static_cast<std::uint32_t>(rng_.Next());
    // Exactly representable scalars (as saxpy_loop's): results do not depend
    // on how the interpreter rounds an intermediate.
    s.scalar = 0.5f + 0.001953125f * static_cast<float>(rng_.Range(0, 15));
    if (two_inputs) {
      EmitOnStream(s, {out, s.src.alloc, s.src2.alloc});
    } else {
      EmitOnStream(s, {out, s.src.alloc});
    }
  }

  WorkloadOptions o_;
  Rng rng_;
  Workload w_;
  std::vector<Alloc> allocs_;      // by allocation index
  std::vector<int> slots_;         // live allocation per slot
  std::vector<std::pair<Kernel, std::uint32_t>> kernels_;  // kernel, function id
  std::uint64_t next_event_ = 0;
};

}  // namespace

std::string Step::Describe() const {
  std::string d = OpName(op);
  if (stream != 0) d += " stream " + std::to_string(stream);
  auto operand = [](const char* what, const Operand& o) {
    return std::string(" ") + what + " alloc " + std::to_string(o.alloc) + "+" + Hex(o.offset);
  };
  switch (op) {
    case Op::kModuleLoad:
    case Op::kStreamCreate:
    case Op::kEventCreate:
    case Op::kEventRecord:
    case Op::kStreamWaitEvent: d += " id " + std::to_string(id); break;
    case Op::kGetFunction: d += std::string(" ") + KernelName(kernel); break;
    case Op::kMalloc: d += " alloc " + std::to_string(dst.alloc) + " " + std::to_string(bytes) + " bytes"; break;
    case Op::kFree:
    case Op::kFreeAsync: d += " alloc " + std::to_string(dst.alloc); break;
    case Op::kH2D:
    case Op::kMemset:
      d += operand("dst", dst) + " " + std::to_string(bytes) + " bytes" + (sync ? " sync" : " async");
      if (op == Op::kMemset) d += " value " + Hex(value) + " x" + std::to_string(element_size);
      break;
    case Op::kD2D:
      d += operand("dst", dst) + operand("src", src) + " " + std::to_string(bytes) + " bytes" +
           (sync ? " sync" : " async");
      break;
    case Op::kGemm:
      d += operand("C", dst) + operand("A", src) + operand("B", src2) + " m " + std::to_string(m) + " n " +
           std::to_string(n) + " k " + std::to_string(k) + " trans " + std::to_string(trans);
      break;
    case Op::kLaunch:
      d += std::string(" ") + KernelName(kernel);
      if (kernel != Kernel::kPtxBump) {
        d += operand("out", dst) + operand("in", src);
        if (kernel == Kernel::kVectorAdd) d += operand("in", src2);
        d += " n " + std::to_string(n);
      }
      break;
    default: break;
  }
  return d;
}

std::vector<int> Workload::LiveAfter(std::size_t k) const {
  std::set<int> live;
  for (std::size_t i = 0; i < k && i < steps.size(); ++i) {
    if (steps[i].op == Op::kMalloc) live.insert(steps[i].dst.alloc);
    if (steps[i].op == Op::kFree || steps[i].op == Op::kFreeAsync) live.erase(steps[i].dst.alloc);
  }
  return {live.begin(), live.end()};
}

std::string Workload::Summary() const {
  std::map<std::string, int> count;
  for (const Step& s : steps) ++count[OpName(s.op)];
  std::string out = std::to_string(steps.size()) + " steps (setup " + std::to_string(setup_steps) + "):";
  for (const auto& [name, n] : count) out += " " + std::to_string(n) + " " + name + ",";
  return out + " " + std::to_string(alloc_bytes.size()) + " allocations";
}

Workload Generate(const WorkloadOptions& options) { return Generator(options).Run(); }

std::vector<std::byte> StepData(const Step& step) {
  std::vector<std::byte> out(step.bytes);
  Rng rng(step.data_seed);
  for (std::size_t i = 0; i < out.size(); i += 8) {
    const std::uint64_t v = rng.Next();
    std::memcpy(out.data() + i, &v, std::min<std::size_t>(8, out.size() - i));
  }
  return out;
}

// ---------------------------------------------------------------- host functions

// The app side of host functions (what libphos.so's host_functions.cc
// does, without a function to run): a sealed shared segment holding the
// doorbell (word 0) and gate words, and a thread that answers every gate
// phosd reached at once.
class HostFunctionResponder {
 public:
  static constexpr std::uint64_t kBytes = 2u << 20;
  static constexpr std::size_t kWords = 1024;  // word 0: the doorbell

  HostFunctionResponder() {
    fd_ = memfd_create("workload-host-functions", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd_ < 0 || ftruncate(fd_, kBytes) != 0 ||
        fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      return;
    }
    void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) return;
    words_ = static_cast<std::atomic<std::uint32_t>*>(p);
    thread_ = std::thread([this] { Run(); });
  }
  ~HostFunctionResponder() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    if (words_ != nullptr) munmap(words_, kBytes);
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return words_ != nullptr; }
  int fd() const { return fd_; }
  std::uint64_t app() const { return reinterpret_cast<std::uint64_t>(words_); }
  std::uint64_t doorbell() const { return app(); }
  /// A gate word for the next function, armed (round robin over 1023).
  std::uint64_t NextWord() {
    const std::size_t i = 1 + (next_++ % (kWords - 1));
    words_[i].store(wire::kHostFuncArmed);
    return app() + i * sizeof(std::uint32_t);
  }
  std::uint64_t answered() const { return answered_.load(); }

 private:
  void Run() {
    while (!stop_.load()) {
      const std::uint32_t rung = words_[0].load();
      bool any = false;
      for (std::size_t i = 1; i < kWords; ++i) {
        if (words_[i].load() != wire::kHostFuncReached) continue;
        answered_.fetch_add(1);  // before the answer: whoever sees the stream pass sees the count
        words_[i].store(wire::kHostFuncDone);
        ring::FutexWake(&words_[i], 1);
        any = true;
      }
      if (!any) (void)ring::FutexWait(&words_[0], rung, 20'000'000);  // 20 ms: then look at stop_
    }
  }

  int fd_ = -1;
  std::atomic<std::uint32_t>* words_ = nullptr;
  std::size_t next_ = 0;  // the issuing thread's
  std::atomic<std::uint64_t> answered_{0};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// ---------------------------------------------------------------- runner

WorkloadRunner::WorkloadRunner(const Workload& workload, FakeApp* app, std::string apps_dir)
    : w_(workload), app_(app), apps_dir_(std::move(apps_dir)), ptrs_(workload.alloc_bytes.size(), 0) {}

WorkloadRunner::~WorkloadRunner() = default;

std::uint64_t WorkloadRunner::host_functions_answered() const {
  return host_functions_ ? host_functions_->answered() : 0;
}

bool WorkloadRunner::Check(WireStatus w, std::size_t i, std::string* why) {
  if (w == WireStatus::kSuccess) return true;
  *why = "step " + std::to_string(i) + " (" + w_.steps[i].Describe() + "): wire status " +
         std::to_string(static_cast<int>(w)) + ": " + app_->message();
  return false;
}

namespace {

std::vector<std::byte> ModuleImage(Module m, const std::string& apps_dir, std::string* why) {
  if (m == Module::kPtx) {
    const auto* p = reinterpret_cast<const std::byte*>(backend::testing::kSaxpyPtx);
    return {p, p + sizeof backend::testing::kSaxpyPtx};
  }
  const char* name = m == Module::kVectorAdd ? "vector_add" : m == Module::kSaxpyLoop ? "saxpy_loop" : "multi_stream";
  const std::string path = apps_dir + "/" + name + ".fatbin";
  std::ifstream f(path, std::ios::binary);
  if (!f.good()) {
    *why = "cannot read " + path + " (tests/apps are built by nvcc)";
    return {};
  }
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  if (!c.empty()) std::memcpy(out.data(), c.data(), c.size());
  return out;
}

wire::LaunchRequest Geometry(const Step& s) {
  wire::LaunchRequest g{};
  g.grid[0] = s.grid;
  g.grid[1] = g.grid[2] = 1;
  g.block[0] = s.block;
  g.block[1] = g.block[2] = 1;
  return g;
}

template <typename T>
std::span<const std::byte> Bytes(const T& v) {
  return std::as_bytes(std::span<const T>(&v, 1));
}

}  // namespace

bool WorkloadRunner::Issue(std::size_t i, std::string* why) {
  const Step& s = w_.steps.at(i);
  auto at = [&](const Operand& o) { return ptrs_.at(o.alloc) + o.offset; };
  switch (s.op) {
    case Op::kModuleLoad: {
      std::vector<std::byte> image = ModuleImage(s.module, apps_dir_, why);
      if (image.empty()) return false;
      return Check(app_->ModuleLoad(s.id, image), i, why);
    }
    case Op::kGetFunction: return Check(app_->GetFunction(s.module_id, s.id, KernelName(s.kernel)), i, why);
    case Op::kGetGlobal:
      return Check(app_->GetGlobal(s.module_id, "phos_counter", &global_ptr_, &global_bytes_), i, why);
    case Op::kStreamCreate: return Check(app_->StreamCreate(s.id), i, why);
    case Op::kEventCreate: return Check(app_->EventCreate(s.id), i, why);
    case Op::kMalloc: {
      std::uint64_t p = 0;
      if (!Check(app_->Malloc(s.bytes, &p), i, why)) return false;
      ptrs_.at(s.dst.alloc) = p;
      return true;
    }
    case Op::kFree: return Check(app_->Free(ptrs_.at(s.dst.alloc)), i, why);
    case Op::kShareSegment: {
      host_functions_ = std::make_unique<HostFunctionResponder>();
      if (!host_functions_->ok()) {
        *why = "step " + std::to_string(i) + ": cannot make a shared segment";
        return false;
      }
      const std::uint64_t app = host_functions_->app(), bytes = HostFunctionResponder::kBytes;
      if (Status c = app_->channel()->SendHostSegment({1, bytes, app}, host_functions_->fd()); !c.ok()) {
        *why = "step " + std::to_string(i) + ": " + c.ToString();
        return false;
      }
      return Check(app_->Send(wire::op::kHostSegmentRegister, wire::HostSegmentRequest{1, bytes, app}), i, why);
    }
    case Op::kHostFunc: {
      if (!host_functions_) {
        *why = "step " + std::to_string(i) + ": no shared segment (kShareSegment) yet";
        return false;
      }
      const wire::HostFuncRequest req{host_functions_->NextWord(), host_functions_->doorbell()};
      return Check(app_->Send(wire::op::kLaunchHostFunc, req, /*call=*/false, s.stream), i, why);
    }
    case Op::kGemm: {  // posted, as cublasSgemm is
      wire::BlasRequest r{};
      r.type_a = r.type_b = r.type_c = r.scalar_type = 0;  // CUDA_R_32F
      r.compute = 68;                                       // CUBLAS_COMPUTE_32F
      r.op_a = s.trans & 1u;
      r.op_b = (s.trans >> 1) & 1u;
      r.m = s.m;
      r.n = s.n;
      r.k = s.k;
      r.batch = 1;
      r.a = at(s.src);
      r.b = at(s.src2);
      r.c = at(s.dst);
      r.lda = r.op_a ? s.k : s.m;
      r.ldb = r.op_b ? s.n : s.k;
      r.ldc = s.m;
      std::memcpy(r.alpha, &s.scalar, sizeof s.scalar);
      std::memcpy(r.beta, &s.beta, sizeof s.beta);
      return Check(app_->Send(wire::op::kBlasGemm, r, /*call=*/false, s.stream), i, why);
    }
    case Op::kFreeAsync:  // posted, as cudaFreeAsync is
      return Check(app_->Send(wire::op::kFreeAsync, wire::PointerRequest{ptrs_.at(s.dst.alloc)}, /*call=*/false,
                              s.stream),
                   i, why);
    case Op::kH2D: {
      const std::vector<std::byte> data = StepData(s);
      return Check(app_->H2D(at(s.dst), data.data(), data.size(), s.stream, s.sync), i, why);
    }
    case Op::kMemset:
      return Check(app_->Memset(at(s.dst), s.value, s.element_size, s.bytes / s.element_size, s.stream, s.sync), i,
                   why);
    case Op::kD2D: return Check(app_->D2D(at(s.dst), at(s.src), s.bytes, s.stream, s.sync), i, why);
    case Op::kLaunch: {
      const wire::LaunchRequest g = Geometry(s);
      switch (s.kernel) {
        case Kernel::kPtxBump: return Check(app_->Launch(s.id, g, {}, s.stream), i, why);
        case Kernel::kPtxSaxpy: {
          struct {
            std::uint64_t x, y;
            float a;
            std::uint32_t n;
          } p{at(s.src), at(s.dst), s.scalar, s.n};
          return Check(app_->Launch(s.id, g, Bytes(p), s.stream), i, why);
        }
        case Kernel::kVectorAdd: {
          struct {
            std::uint64_t a, b, c;
            std::int32_t n;
          } p{at(s.src), at(s.src2), at(s.dst), static_cast<std::int32_t>(s.n)};
          return Check(app_->Launch(s.id, g, Bytes(p), s.stream), i, why);
        }
        case Kernel::kSaxpy: {
          struct {
            float a;
            std::uint64_t x, y;
            std::int32_t n;
          } p{s.scalar, at(s.src), at(s.dst), static_cast<std::int32_t>(s.n)};
          return Check(app_->Launch(s.id, g, Bytes(p), s.stream), i, why);
        }
        case Kernel::kTransform: {
          struct {
            std::uint64_t in, out;
            std::int32_t n;
            std::uint32_t salt;
          } p{at(s.src), at(s.dst), static_cast<std::int32_t>(s.n), s.salt};
          return Check(app_->Launch(s.id, g, Bytes(p), s.stream), i, why);
        }
      }
      return false;
    }
    case Op::kStreamSync: return Check(app_->StreamSync(s.stream), i, why);
    case Op::kDeviceSync: return Check(app_->DeviceSync(), i, why);
    case Op::kEventRecord: return Check(app_->EventRecord(s.id, s.stream), i, why);
    case Op::kStreamWaitEvent: return Check(app_->StreamWaitEvent(s.stream, s.id), i, why);
  }
  *why = "unknown op";
  return false;
}

bool WorkloadRunner::ReadBack(int alloc, std::vector<std::byte>* out, std::string* why) {
  WireStatus w = app_->DeviceSync();
  if (w == WireStatus::kSuccess) {
    out->assign(w_.alloc_bytes.at(alloc), std::byte{0});
    w = app_->D2H(out->data(), ptrs_.at(alloc), out->size());
  }
  if (w != WireStatus::kSuccess) {
    *why = "reading alloc " + std::to_string(alloc) + " back: wire status " + std::to_string(static_cast<int>(w)) +
           ": " + app_->message();
    return false;
  }
  return true;
}

bool WorkloadRunner::ReadGlobal(std::vector<std::byte>* out, std::string* why) {
  WireStatus w = app_->DeviceSync();
  if (w == WireStatus::kSuccess) {
    out->assign(global_bytes_, std::byte{0});
    w = app_->D2H(out->data(), global_ptr_, out->size());
  }
  if (w != WireStatus::kSuccess) {
    *why = "reading phos_counter back: " + app_->message();
    return false;
  }
  return true;
}

}  // namespace phos::engine::testing
