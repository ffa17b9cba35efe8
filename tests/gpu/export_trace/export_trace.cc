// libphos_export_trace.so: which slots of the driver's private tables a
// program calls (docs/export-tables-research.md: cuFFT's and PyTorch's
// runtimes ask for tables phos does not serve, and what their slots do is
// learnt by watching them against a real driver).
//
//   PHOS_EXPORT_TRACE=FILE LD_PRELOAD=libphos_export_trace.so PROGRAM ...
//
// The CUDA runtime a program or library embeds reaches the driver through
// dlsym(libcuda, ...): this library interposes dlsym, so `cuGetExportTable`
// (also when it comes through cuGetProcAddress) is its wrapper. That calls
// the driver's, and hands back a copy of the table whose function slots are
// thunks: a thunk logs "TABLE[SLOT](rdi, rsi, rdx, rcx, r8, r9)" and jumps to
// the driver's function with every register and the stack as they were, so
// the program runs as without the tracer. CUDART_INTERFACE and
// INTEGRITY_CHECK go out as they are (the runtime hashes their addresses). A slot is a function when its
// word points into an executable mapping of the process; a table whose
// first word is a small multiple of 8 is taken to start with its size in
// bytes (the runtime's convention), else it is read up to the first word
// that is neither null nor a function (at most kMaxSlots).
//
// Lines go to FILE (appended; default stderr): one per table handed out,
// one per call (the first kMaxLogged calls of each slot), and at exit a
// summary of every slot called with its count. x86-64 Linux only.
//
// A tool for GPU sessions (tests/gpu/run.sh "trace"), checked on the sim by
// integration_apps_test (the static runtime's calls into phos's tables).
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace {

constexpr int kMaxTables = 64;
constexpr int kMaxSlots = 128;
constexpr std::uint64_t kMaxLogged = 200;
constexpr std::size_t kThunkBytes = 32;

struct Slot {
  const void* original = nullptr;
  std::atomic<std::uint64_t> calls{0};
};

struct Table {
  unsigned char uuid[16] = {};
  char name[40] = {};
  const void* original = nullptr;
  void** copy = nullptr;
  int slots = 0;
  Slot slot[kMaxSlots];
};

// Written under g_mu only; a thunk reads its Table by index, after the copy
// holding the thunk was handed out (the mutex's release orders the writes).
std::mutex g_mu;
Table g_tables[kMaxTables];
int g_table_count = 0;
unsigned char* g_thunks = nullptr;  // kMaxTables * kMaxSlots thunks, made once
int g_log_fd = -1;

using DlsymFn = void* (*)(void*, const char*);
using ExportTableFn = int (*)(const void**, const void*);
using GetProcAddressV2Fn = int (*)(const char*, void**, int, std::uint64_t, void*);
using GetProcAddressFn = int (*)(const char*, void**, int, std::uint64_t);
std::atomic<ExportTableFn> g_real_export_table{nullptr};
std::atomic<GetProcAddressV2Fn> g_real_get_proc_v2{nullptr};
std::atomic<GetProcAddressFn> g_real_get_proc{nullptr};

}  // namespace

// glibc's dlsym; read by the dlsym stub below (set by the constructor, or
// by the first call that finds it unset).
extern "C" {
__attribute__((visibility("hidden"))) DlsymFn phos_export_trace_real_dlsym = nullptr;
}

extern "C" __attribute__((visibility("hidden"))) DlsymFn phos_export_trace_find_dlsym() {
  if (phos_export_trace_real_dlsym == nullptr) {
    DlsymFn real = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"));
    if (real == nullptr) real = reinterpret_cast<DlsymFn>(dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"));
    phos_export_trace_real_dlsym = real;
  }
  return phos_export_trace_real_dlsym;
}

__attribute__((constructor)) static void FindDlsymEarly() { (void)phos_export_trace_find_dlsym(); }

namespace {

void Write(const char* text, std::size_t n) {
  const int fd = g_log_fd >= 0 ? g_log_fd : 2;
  while (n > 0) {
    const ssize_t w = ::write(fd, text, n);
    if (w <= 0) return;
    text += w;
    n -= static_cast<std::size_t>(w);
  }
}

void OpenLog() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (const char* path = std::getenv("PHOS_EXPORT_TRACE"); path != nullptr && *path != '\0') {
      g_log_fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    }
  });
}

// The process's mappings, read once from /proc/self/maps for each table
// handed out (a table's words are checked against them one by one).
struct Mappings {
  struct Range {
    std::uintptr_t lo = 0, hi = 0;
    char mode[8] = {};
  };
  Range range[4096];
  int count = 0;

  void Read() {
    count = 0;
    FILE* maps = std::fopen("/proc/self/maps", "re");
    if (maps == nullptr) return;
    char line[512];
    while (count < static_cast<int>(sizeof range / sizeof range[0]) && std::fgets(line, sizeof line, maps) != nullptr) {
      Range& r = range[count];
      if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s", &r.lo, &r.hi, r.mode) == 3) ++count;
    }
    std::fclose(maps);
  }
  // Whether [p, p + bytes) lies in one mapping with all of `perms` ("r", "x").
  bool Has(const void* p, std::size_t bytes, const char* perms) const {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    for (int i = 0; i < count; ++i) {
      if (a < range[i].lo || a + bytes > range[i].hi) continue;
      for (const char* c = perms; *c != '\0'; ++c) {
        if (std::strchr(range[i].mode, *c) == nullptr) return false;
      }
      return true;
    }
    return false;
  }
};
Mappings g_maps;  // guarded by g_mu (Wrap)

void FormatUuid(const unsigned char* b, char* out) {
  std::snprintf(out, 40, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
                b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

}  // namespace

// The thunks' common part (thunk: `mov r11, id; mov r10, trace_common; jmp
// r10`). Saves the argument registers and rax (a variadic callee's vector
// count), calls phos_export_trace_log(id, saved) for the function to run,
// restores everything and jumps there: the callee sees the call as made.
extern "C" const void* phos_export_trace_log(std::uint64_t id, const std::uint64_t* saved);
asm(R"(
    .text
    .globl phos_export_trace_common
    .hidden phos_export_trace_common
    .type phos_export_trace_common, @function
phos_export_trace_common:
    push %rax
    push %rdi
    push %rsi
    push %rdx
    push %rcx
    push %r8
    push %r9
    sub $128, %rsp
    movdqu %xmm0, 0(%rsp)
    movdqu %xmm1, 16(%rsp)
    movdqu %xmm2, 32(%rsp)
    movdqu %xmm3, 48(%rsp)
    movdqu %xmm4, 64(%rsp)
    movdqu %xmm5, 80(%rsp)
    movdqu %xmm6, 96(%rsp)
    movdqu %xmm7, 112(%rsp)
    mov %r11, %rdi
    lea 128(%rsp), %rsi
    call phos_export_trace_log
    mov %rax, %r11
    movdqu 0(%rsp), %xmm0
    movdqu 16(%rsp), %xmm1
    movdqu 32(%rsp), %xmm2
    movdqu 48(%rsp), %xmm3
    movdqu 64(%rsp), %xmm4
    movdqu 80(%rsp), %xmm5
    movdqu 96(%rsp), %xmm6
    movdqu 112(%rsp), %xmm7
    add $128, %rsp
    pop %r9
    pop %r8
    pop %rcx
    pop %rdx
    pop %rsi
    pop %rdi
    pop %rax
    jmp *%r11
    .size phos_export_trace_common, .-phos_export_trace_common
)");
extern "C" void phos_export_trace_common();

// saved: r9, r8, rcx, rdx, rsi, rdi, rax (lowest address first).
extern "C" const void* phos_export_trace_log(std::uint64_t id, const std::uint64_t* saved) {
  Table& t = g_tables[id / kMaxSlots];
  Slot& s = t.slot[id % kMaxSlots];
  const std::uint64_t n = s.calls.fetch_add(1, std::memory_order_relaxed) + 1;
  if (n <= kMaxLogged) {
    char line[256];
    const int len = std::snprintf(line, sizeof line,
                                  "export-trace: call %s[%u](0x%" PRIx64 ", 0x%" PRIx64 ", 0x%" PRIx64 ", 0x%" PRIx64
                                  ", 0x%" PRIx64 ", 0x%" PRIx64 ") #%" PRIu64 "\n",
                                  t.name, static_cast<unsigned>(id % kMaxSlots), saved[5], saved[4], saved[3],
                                  saved[2], saved[1], saved[0], n);
    if (len > 0) Write(line, static_cast<std::size_t>(len) < sizeof line ? static_cast<std::size_t>(len) : sizeof line - 1);
  }
  return s.original;
}

namespace {

const void* MakeThunk(int table, int slot) {
  if (g_thunks == nullptr) {
    void* p = mmap(nullptr, kMaxTables * kMaxSlots * kThunkBytes, PROT_READ | PROT_WRITE | PROT_EXEC,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    g_thunks = static_cast<unsigned char*>(p);
  }
  unsigned char* t = g_thunks + (static_cast<std::size_t>(table) * kMaxSlots + slot) * kThunkBytes;
  const std::uint64_t id = static_cast<std::uint64_t>(table) * kMaxSlots + static_cast<std::uint64_t>(slot);
  const auto common = reinterpret_cast<std::uint64_t>(&phos_export_trace_common);
  t[0] = 0x49; t[1] = 0xbb; std::memcpy(t + 2, &id, 8);       // mov r11, id
  t[10] = 0x49; t[11] = 0xba; std::memcpy(t + 12, &common, 8);  // mov r10, common
  t[20] = 0x41; t[21] = 0xff; t[22] = 0xe2;                    // jmp r10
  return t;
}

// A copy of the driver's table `original` with thunks in its function
// slots (the same copy for every later request of that uuid).
// Tables handed out as they are: the runtime's integrity check hashes the
// addresses of CUDART_INTERFACE, of INTEGRITY_CHECK and of its slot 1
// (docs/interposer.md "Export tables"), so a copy of either fails it
// ("integrity checks failed"). phos serves both already.
constexpr unsigned char kUnwrapped[][16] = {
    {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9},  // CUDART_INTERFACE
    {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2},  // INTEGRITY_CHECK
};

const void* Wrap(const void* original, const unsigned char* uuid) {
  for (const auto& u : kUnwrapped) {
    if (std::memcmp(u, uuid, 16) != 0) continue;
    char name[40];
    FormatUuid(uuid, name);
    char line[160];
    const int len = std::snprintf(line, sizeof line,
                                  "export-trace: table %s at %p handed out as it is (integrity-checked)\n", name,
                                  original);
    Write(line, static_cast<std::size_t>(len));
    return original;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  for (int i = 0; i < g_table_count; ++i) {
    if (std::memcmp(g_tables[i].uuid, uuid, 16) == 0 && g_tables[i].original == original) return g_tables[i].copy;
  }
  char name[40];
  FormatUuid(uuid, name);
  g_maps.Read();
  if (g_table_count == kMaxTables || !g_maps.Has(original, 8, "r")) {
    char line[160];
    const int len = std::snprintf(line, sizeof line, "export-trace: table %s at %p handed out unwrapped\n", name,
                                  original);
    Write(line, static_cast<std::size_t>(len));
    return original;
  }
  const auto* words = static_cast<const std::uint64_t*>(original);
  int count = 0;
  bool sized = false;
  if (words[0] != 0 && words[0] % 8 == 0 && words[0] <= 8 * kMaxSlots) {
    sized = true;
    count = static_cast<int>(words[0] / 8);
    if (!g_maps.Has(original, words[0], "r")) count = 1;
  } else {
    while (count < kMaxSlots && g_maps.Has(words + count, 8, "r")) {
      const auto* w = reinterpret_cast<const void*>(words[count]);
      if (w != nullptr && !g_maps.Has(w, 1, "x")) break;
      ++count;
    }
  }
  const int index = g_table_count;
  Table& t = g_tables[index];
  std::memcpy(t.uuid, uuid, 16);
  std::memcpy(t.name, name, sizeof name);
  t.original = original;
  t.slots = count;
  t.copy = static_cast<void**>(std::calloc(static_cast<std::size_t>(count > 0 ? count : 1), sizeof(void*)));
  int functions = 0;
  for (int i = 0; i < count; ++i) {
    const auto* w = reinterpret_cast<const void*>(words[i]);
    t.copy[i] = const_cast<void*>(w);
    if ((sized && i == 0) || w == nullptr || !g_maps.Has(w, 1, "x")) continue;
    t.slot[i].original = w;
    if (const void* thunk = MakeThunk(index, i); thunk != nullptr) {
      t.copy[i] = const_cast<void*>(thunk);
      ++functions;
    }
  }
  g_table_count = index + 1;
  char line[200];
  const int len = std::snprintf(line, sizeof line, "export-trace: table %s at %p: %d words%s, %d functions traced\n",
                                name, original, count, sized ? " (sized)" : "", functions);
  Write(line, static_cast<std::size_t>(len));
  return t.copy;
}

int TracedExportTable(const void** table, const void* uuid) {
  OpenLog();
  ExportTableFn real = g_real_export_table.load();
  if (real == nullptr) return 3;  // CUDA_ERROR_NOT_INITIALIZED
  const int rc = real(table, uuid);
  const auto* b = static_cast<const unsigned char*>(uuid);
  if (rc != 0 || table == nullptr || *table == nullptr || uuid == nullptr) {
    char name[40] = "?";
    if (uuid != nullptr) FormatUuid(b, name);
    char line[120];
    const int len = std::snprintf(line, sizeof line, "export-trace: table %s refused (%d)\n", name, rc);
    Write(line, static_cast<std::size_t>(len));
    return rc;
  }
  *table = Wrap(*table, b);
  return rc;
}

int TracedGetProcAddressV2(const char* symbol, void** fn, int version, std::uint64_t flags, void* status);
int TracedGetProcAddress(const char* symbol, void** fn, int version, std::uint64_t flags);

// cuGetProcAddress hands out cuGetExportTable too, and itself (the runtime
// asks it for "cuGetProcAddress" and goes on with the answer): both are
// swapped the same way. Its ABI follows the version asked: 12.0 on has the
// status argument.
void Swap(int rc, const char* symbol, int version, void** fn) {
  if (rc != 0 || symbol == nullptr || fn == nullptr || *fn == nullptr) return;
  if (std::strcmp(symbol, "cuGetExportTable") == 0) {
    g_real_export_table.store(reinterpret_cast<ExportTableFn>(*fn));
    *fn = reinterpret_cast<void*>(&TracedExportTable);
  } else if (std::strcmp(symbol, "cuGetProcAddress") == 0 && version >= 12000) {
    g_real_get_proc_v2.store(reinterpret_cast<GetProcAddressV2Fn>(*fn));
    *fn = reinterpret_cast<void*>(&TracedGetProcAddressV2);
  } else if (std::strcmp(symbol, "cuGetProcAddress") == 0) {
    g_real_get_proc.store(reinterpret_cast<GetProcAddressFn>(*fn));
    *fn = reinterpret_cast<void*>(&TracedGetProcAddress);
  }
}

int TracedGetProcAddressV2(const char* symbol, void** fn, int version, std::uint64_t flags, void* status) {
  GetProcAddressV2Fn real = g_real_get_proc_v2.load();
  if (real == nullptr) return 3;
  const int rc = real(symbol, fn, version, flags, status);
  Swap(rc, symbol, version, fn);
  return rc;
}

int TracedGetProcAddress(const char* symbol, void** fn, int version, std::uint64_t flags) {
  GetProcAddressFn real = g_real_get_proc.load();
  if (real == nullptr) return 3;
  const int rc = real(symbol, fn, version, flags);
  Swap(rc, symbol, version, fn);
  return rc;
}

void Summary() {
  std::lock_guard<std::mutex> lock(g_mu);
  for (int i = 0; i < g_table_count; ++i) {
    const Table& t = g_tables[i];
    for (int s = 0; s < t.slots; ++s) {
      const std::uint64_t n = t.slot[s].calls.load();
      if (n == 0) continue;
      char line[120];
      const int len = std::snprintf(line, sizeof line, "export-trace: summary %s[%d] called %" PRIu64 " times\n",
                                    t.name, s, n);
      Write(line, static_cast<std::size_t>(len));
    }
  }
}

struct AtExit {
  ~AtExit() { Summary(); }
} g_at_exit;

}  // namespace

// dlsym for everyone: the driver's entry points that hand out tables are
// swapped for the wrappers above; everything else is the real answer.
// RTLD_NEXT is resolved by glibc relative to its caller, so those calls
// jump straight to glibc's dlsym (the stub below) with the caller's return
// address; every other handle comes here.
extern "C" __attribute__((visibility("hidden"))) void* phos_export_trace_dlsym(void* handle, const char* symbol) {
  DlsymFn real = phos_export_trace_find_dlsym();
  if (real == nullptr) return nullptr;
  void* p = real(handle, symbol);
  if (p == nullptr || symbol == nullptr) return p;
  if (std::strcmp(symbol, "cuGetExportTable") == 0) {
    g_real_export_table.store(reinterpret_cast<ExportTableFn>(p));
    return reinterpret_cast<void*>(&TracedExportTable);
  }
  if (std::strcmp(symbol, "cuGetProcAddress_v2") == 0) {
    g_real_get_proc_v2.store(reinterpret_cast<GetProcAddressV2Fn>(p));
    return reinterpret_cast<void*>(&TracedGetProcAddressV2);
  }
  if (std::strcmp(symbol, "cuGetProcAddress") == 0) {
    g_real_get_proc.store(reinterpret_cast<GetProcAddressFn>(p));
    return reinterpret_cast<void*>(&TracedGetProcAddress);
  }
  return p;
}

asm(R"(
    .text
    .globl dlsym
    .type dlsym, @function
dlsym:
    cmp $-1, %rdi
    jne 1f
    mov phos_export_trace_real_dlsym(%rip), %rax
    test %rax, %rax
    je 1f
    jmp *%rax
1:
    jmp phos_export_trace_dlsym
    .size dlsym, .-dlsym
)");
