#include "interposer/export/unsupported.h"

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdio>

namespace phos::interposer {
namespace {

struct UnsupportedState {
  std::array<std::atomic<bool>, kApiCount> logged{};
  std::array<std::atomic<uint64_t>, kApiCount> count{};
};

// Constant-initialised (zeroed atomics): usable from any static initialiser.
UnsupportedState g_state;

}  // namespace

void ReportUnsupported(ApiId id) {
  auto i = static_cast<size_t>(id);
  if (i >= kApiCount) return;
  g_state.count[i].fetch_add(1, std::memory_order_relaxed);
  // exchange: exactly one caller sees false, however many threads race here.
  if (!g_state.logged[i].exchange(true, std::memory_order_relaxed)) {
    std::fprintf(stderr, "phos: %s is not supported by phos yet\n", ApiName(id));
    std::fflush(stderr);
  }
}

uint64_t UnsupportedCount(ApiId id) {
  auto i = static_cast<size_t>(id);
  return i < kApiCount ? g_state.count[i].load(std::memory_order_relaxed) : 0;
}

bool UnsupportedLogged(ApiId id) {
  auto i = static_cast<size_t>(id);
  return i < kApiCount && g_state.logged[i].load(std::memory_order_relaxed);
}

}  // namespace phos::interposer
