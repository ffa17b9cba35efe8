// precopy_stream_bench: live migration's pre-copy stream at full speed —
// PrecopySender (the source phosd's side) streaming MIB MiB of buffer
// copies from memory to a listening phosd, which checks every chunk's xxh3
// and writes them into its pre-copy file, as a migration's rounds do but
// without the engine and the device in front (those are measured by
// process_cr_bench.sh). transfer_bench.sh runs it beside iperf3 and
// `phos send-image` (docs/benchmarks.md "Data channel vs gRPC vs iperf3").
//
//   precopy_stream_bench --to HOST:PORT --peer-token FILE [--mib N]
//                        [--copy-mib N] [--name NAME]
//
// Prints one line: "precopy: B bytes in S s, R MB/s (TRANSPORT)". The
// copies' checksums are computed before the clock starts (the engine has
// them from staging); the clock runs from Open to the destination's answer
// that it holds every copy (sealed).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/xxh3.h"
#include "image/image_layout.h"
#include "peer/peer_token.h"
#include "peer/precopy_sender.h"

int main(int argc, char** argv) {
  CLI::App app{"Pre-copy stream throughput against a listening phosd"};
  std::string to, token_file, name = "precopy-bench";
  std::uint64_t mib = 1024, copy_mib = 16;
  app.add_option("--to", to, "The destination phosd's --listen HOST:PORT")->required();
  app.add_option("--peer-token", token_file, "The peer token file both daemons use")->required();
  app.add_option("--mib", mib, "MiB to pre-copy")->check(CLI::Range(1, 1 << 20));
  app.add_option("--copy-mib", copy_mib, "MiB per buffer copy")->check(CLI::Range(1, 1024));
  app.add_option("--name", name, "The image name the pre-copy is for");
  CLI11_PARSE(app, argc, argv);

  std::string token;
  if (phos::Status s = phos::peer::LoadPeerToken(token_file, &token); !s.ok()) {
    std::fprintf(stderr, "precopy_stream_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  const std::uint64_t total = mib << 20, copy_bytes = copy_mib << 20;
  const std::uint64_t chunk = phos::image::kDefaultChunkBytes;
  std::vector<std::uint64_t> words(total / 8);
  std::mt19937_64 rng(42);
  for (std::uint64_t& w : words) w = rng();
  const auto* bytes = reinterpret_cast<const std::byte*>(words.data());
  struct Copy {
    phos::engine::StagedCopy staged;
    std::vector<std::uint64_t> xxh3;
  };
  std::vector<Copy> copies;
  for (std::uint64_t off = 0; off < total; off += copy_bytes) {
    Copy c;
    c.staged.copy_id = copies.size() + 1;
    c.staged.address = 0x7f0000000000ull + off;
    c.staged.bytes = std::min(copy_bytes, total - off);
    c.staged.data = bytes + off;
    c.staged.chunk_bytes = chunk;
    for (std::uint64_t at = 0; at < c.staged.bytes; at += chunk) {
      c.xxh3.push_back(XXH3_64bits(bytes + off + at, std::min(chunk, c.staged.bytes - at)));
    }
    copies.push_back(std::move(c));
  }

  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<phos::peer::PrecopySender> sender;
  phos::Status s = phos::peer::PrecopySender::Open(to, token, name, /*max_bytes_per_sec=*/0, &sender);
  for (Copy& c : copies) {
    if (!s.ok()) break;
    c.staged.chunk_xxh3 = &c.xxh3;
    s = sender->Staged(c.staged);
  }
  phos::peer::PrecopyStats stats;
  if (s.ok()) s = sender->Finish(&stats);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!s.ok()) {
    std::fprintf(stderr, "precopy_stream_bench: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("precopy: %llu bytes in %.3f s, %.0f MB/s (%s)\n", static_cast<unsigned long long>(stats.bytes), secs,
              static_cast<double>(stats.bytes) / 1e6 / secs, stats.transport.c_str());
  return 0;
}
