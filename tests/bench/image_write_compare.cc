// image_write_compare: checkpoint image write throughput of ImageWriter
// (io_uring + O_DIRECT, one gpu.img) against what a naive checkpointer does:
// one file per buffer, open/write/fsync/close, plain buffered write(2).
// tests/bench/image_write_compare.sh runs it next to fio and dd on the same
// directory (docs/benchmarks.md "Image write throughput vs fio/dd and
// file-per-buffer").
//
// Both writers get the same buffer mix: sizes drawn log-uniformly between
// --min-kib and --max-mib (seeded, so every run and both writers see the
// same list) until --total-mib is reached — many small buffers, a few large
// ones carrying most of the bytes, like a GPU process's allocations. Both
// are timed to durability: ImageWriter from Open to the end of Commit
// (gpu.img and manifest fsynced, directory renamed and synced); the
// baseline from the first open to the fsync of its directory. Throughput is
// the buffers' bytes (not gpu.img's 4 KiB padding) over that time.
//
// Rounds alternate which writer goes first, so neither always meets the
// other's page-cache writeback. Only ratios measured in one run mean much on
// a shared machine.
//
//   build/tests/bench/image_write_compare --dir /var/tmp/x --total-mib 4096 --rounds 3
//   ... --plan-only --json     # the buffer mix only (the script sizes fio/dd with it)
//   ... --verify               # read both images back and compare (smoke test)
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/logging.h"
#include "image/image_reader.h"
#include "image/image_writer.h"

namespace {

using namespace phos::image;
using Clock = std::chrono::steady_clock;

struct Flags {
  std::string dir = "/var/tmp/phos-image-compare";
  std::uint64_t total_mib = 4096;
  std::uint64_t min_kib = 1;
  std::uint64_t max_mib = 64;
  std::uint64_t seed = 1;
  std::uint64_t chunk_kib = kDefaultChunkBytes >> 10;
  std::size_t queue_depth = IoOptions{}.queue_depth;
  int threads = 1;
  int rounds = 1;
  int first_round = 1;
  double settle_s = 0;
  std::string only;  // "", "phos" or "posix"
  bool plan_only = false;
  bool verify = false;
  bool json = false;
};

// The buffer mix: log-uniform sizes in [min, max], the last one cut so the
// sizes add up to exactly `total`.
std::vector<std::uint64_t> MakePlan(const Flags& f) {
  const std::uint64_t total = f.total_mib << 20;
  const double lo = std::log(static_cast<double>(f.min_kib << 10));
  const double hi = std::log(static_cast<double>(f.max_mib << 20));
  std::mt19937_64 rng(f.seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<std::uint64_t> sizes;
  std::uint64_t sum = 0;
  while (sum < total) {
    std::uint64_t n = static_cast<std::uint64_t>(std::exp(dist(rng)));
    n = std::min(std::max<std::uint64_t>(n, 1), total - sum);
    sizes.push_back(n);
    sum += n;
  }
  return sizes;
}

// Bytes every buffer is written from: random (no filesystem or device can
// shortcut them), one max-sized pattern plus slack so buffers start at
// different offsets of it.
constexpr std::uint64_t kSlack = 1ull << 20;
std::vector<std::uint8_t> MakeSource(std::uint64_t max_bytes) {
  std::vector<std::uint8_t> v(max_bytes + kSlack);
  std::mt19937_64 rng(42);
  for (std::size_t i = 0; i + 8 <= v.size(); i += 8) {
    const std::uint64_t x = rng();
    std::memcpy(v.data() + i, &x, 8);
  }
  return v;
}
const std::uint8_t* SourceOf(const std::vector<std::uint8_t>& src, std::size_t i) {
  return src.data() + (i * 4099 * 64) % kSlack;
}

std::string FsType(const std::string& dir) {
  struct statfs s {};
  if (::statfs(dir.c_str(), &s) != 0) return "unknown";
  switch (static_cast<unsigned long>(s.f_type)) {
    case 0xEF53: return "ext2/3/4";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs";
    case 0x794c7630: return "overlayfs";
    case 0x2FC12FC1: return "zfs";
    default: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "0x%lx", static_cast<unsigned long>(s.f_type));
      return buf;
    }
  }
}

struct Result {
  std::string method;
  int round = 0;
  double seconds = 0;
  std::uint64_t bytes = 0;       // buffer bytes
  std::uint64_t disk_bytes = 0;  // what went to files (gpu.img incl. padding, or the files)
  std::string backend;
  double mbps() const { return seconds > 0 ? bytes / seconds / 1e6 : 0; }
};

// One image through ImageWriter; `threads` writer threads take chunks from
// one list (the engine uses one: the session's consumer thread).
phos::Status RunPhos(const Flags& f, const std::vector<std::uint64_t>& plan,
                     const std::vector<std::uint8_t>& src, const std::string& dir, Result* r) {
  const std::uint64_t chunk = f.chunk_kib << 10;
  ImageWriterOptions o;
  o.chunk_bytes = chunk;
  o.io.queue_depth = f.queue_depth;
  const auto t0 = Clock::now();
  std::unique_ptr<ImageWriter> w;
  PHOS_RETURN_IF_ERROR(ImageWriter::Open(dir, {}, o, &w));
  struct Piece {
    std::size_t buffer;
    std::uint64_t offset, len;
  };
  std::vector<Piece> pieces;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    std::size_t index = 0;
    PHOS_RETURN_IF_ERROR(w->AddBuffer(0x7f0000000000ull + (i << 32), plan[i], &index));
    for (std::uint64_t off = 0; off < plan[i]; off += chunk) {
      pieces.push_back({index, off, std::min(chunk, plan[i] - off)});
    }
  }
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  phos::Status first_error;
  std::mutex error_mu;  // guards first_error
  auto work = [&] {
    for (std::size_t k; !failed && (k = next.fetch_add(1)) < pieces.size();) {
      const Piece& p = pieces[k];
      phos::Status s = w->Write(p.buffer, p.offset, SourceOf(src, p.buffer) + p.offset, p.len);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!failed.exchange(true)) first_error = s;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < f.threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (failed) return first_error;
  r->backend = std::string(w->io_backend_name());
  PHOS_RETURN_IF_ERROR(w->Commit());
  r->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  struct stat st {};
  if (::stat((dir + "/" + std::string(kGpuImgName)).c_str(), &st) == 0) r->disk_bytes = st.st_size;
  return phos::Status::Ok();
}

phos::Status Errno(const std::string& what, const std::string& path) {
  return phos::Status::Internal(what + " " + path + ": " + std::strerror(errno));
}

// The naive checkpointer: a file per buffer, buffered write, fsync each.
phos::Status RunPosix(const std::vector<std::uint64_t>& plan,
                      const std::vector<std::uint8_t>& src, const std::string& dir, Result* r) {
  const auto t0 = Clock::now();
  if (::mkdir(dir.c_str(), 0755) != 0) return Errno("mkdir", dir);
  for (std::size_t i = 0; i < plan.size(); ++i) {
    const std::string path = dir + "/buf-" + std::to_string(i);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return Errno("open", path);
    const std::uint8_t* p = SourceOf(src, i);
    for (std::uint64_t done = 0; done < plan[i];) {
      const ssize_t n = ::write(fd, p + done, plan[i] - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fd);
        return Errno("write", path);
      }
      done += static_cast<std::uint64_t>(n);
    }
    if (::fsync(fd) != 0) {
      ::close(fd);
      return Errno("fsync", path);
    }
    ::close(fd);
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || ::fsync(dfd) != 0) return Errno("fsync", dir);
  ::close(dfd);
  r->seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  r->backend = "open/write/fsync per buffer";
  for (std::uint64_t n : plan) r->disk_bytes += n;
  return phos::Status::Ok();
}

// Reads both images back and compares every byte with the source: a
// benchmark that wrote nothing (or the wrong bytes) must not look fast.
phos::Status Verify(const std::vector<std::uint64_t>& plan, const std::vector<std::uint8_t>& src,
                    const std::string& phos_dir, const std::string& posix_dir) {
  std::vector<std::uint8_t> got;
  if (!phos_dir.empty()) {
    std::unique_ptr<ImageReader> rd;
    PHOS_RETURN_IF_ERROR(ImageReader::Open(phos_dir, {}, &rd));
    if (rd->buffer_count() != plan.size()) return phos::Status::Internal("phos image: buffer count");
    for (std::size_t i = 0; i < plan.size(); ++i) {
      got.assign(plan[i], 0);
      PHOS_RETURN_IF_ERROR(rd->ReadBuffer(i, got.data()));
      if (std::memcmp(got.data(), SourceOf(src, i), plan[i]) != 0) {
        return phos::Status::Internal("phos image: buffer " + std::to_string(i) + " differs");
      }
    }
  }
  if (!posix_dir.empty()) {
    for (std::size_t i = 0; i < plan.size(); ++i) {
      const std::string path = posix_dir + "/buf-" + std::to_string(i);
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return Errno("open", path);
      got.assign(plan[i] + 1, 0);
      const ssize_t n = ::pread(fd, got.data(), got.size(), 0);
      ::close(fd);
      if (n != static_cast<ssize_t>(plan[i]) || std::memcmp(got.data(), SourceOf(src, i), plan[i]) != 0) {
        return phos::Status::Internal("posix copy: " + path + " differs");
      }
    }
  }
  return phos::Status::Ok();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"image write throughput: ImageWriter vs a file per buffer with fsync"};
  app.add_option("--dir", f.dir, "directory to write in (created; not tmpfs)");
  app.add_option("--total-mib", f.total_mib, "bytes of all buffers, MiB")->check(CLI::PositiveNumber);
  app.add_option("--min-kib", f.min_kib, "smallest buffer, KiB")->check(CLI::PositiveNumber);
  app.add_option("--max-mib", f.max_mib, "largest buffer, MiB")->check(CLI::PositiveNumber);
  app.add_option("--seed", f.seed, "seed of the buffer mix");
  app.add_option("--chunk-kib", f.chunk_kib, "ImageWriter chunk size, KiB (multiple of 4)");
  app.add_option("--queue-depth", f.queue_depth, "ImageWriter requests in flight")->check(CLI::PositiveNumber);
  app.add_option("--threads", f.threads, "ImageWriter writer threads")->check(CLI::PositiveNumber);
  app.add_option("--rounds", f.rounds, "rounds (each writes both)")->check(CLI::PositiveNumber);
  app.add_option("--first-round", f.first_round,
                 "number of the first round (odd: phos writes first, even: the baseline)");
  app.add_option("--only", f.only, "run one writer")->check(CLI::IsMember({"phos", "posix"}));
  app.add_option("--settle", f.settle_s,
                 "sync(2) and sleep this many seconds before each writer (lets the previous "
                 "run's writeback finish)");
  app.add_flag("--plan-only", f.plan_only, "print the buffer mix and exit");
  app.add_flag("--verify", f.verify, "read back and compare after each round");
  app.add_flag("--json", f.json, "one JSON object on stdout");
  std::string log_level = "warn";
  app.add_option("--log-level", log_level, "phos log level (logs go to stderr)");
  CLI11_PARSE(app, argc, argv);
  if (phos::Status s = phos::InitLogging(log_level); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return 2;
  }
  if ((f.min_kib << 10) > (f.max_mib << 20)) {
    std::fprintf(stderr, "--min-kib must not exceed --max-mib\n");
    return 2;
  }

  const std::vector<std::uint64_t> plan = MakePlan(f);
  std::uint64_t total = 0, padded = kGpuImgHeaderBlock, largest = 0, small = 0;
  for (std::uint64_t n : plan) {
    total += n;
    padded += RoundUp(n, kAlign);
    largest = std::max(largest, n);
    small += n < (1u << 20);
  }
  char plan_json[512];
  std::snprintf(plan_json, sizeof plan_json,
                "{\"buffers\": %zu, \"bytes\": %llu, \"gpu_img_bytes\": %llu, \"largest\": %llu, "
                "\"under_1mib\": %llu, \"min_kib\": %llu, \"max_mib\": %llu, \"seed\": %llu, "
                "\"chunk_kib\": %llu, \"queue_depth\": %zu}",
                plan.size(), static_cast<unsigned long long>(total),
                static_cast<unsigned long long>(padded), static_cast<unsigned long long>(largest),
                static_cast<unsigned long long>(small), static_cast<unsigned long long>(f.min_kib),
                static_cast<unsigned long long>(f.max_mib), static_cast<unsigned long long>(f.seed),
                static_cast<unsigned long long>(f.chunk_kib), f.queue_depth);
  if (f.plan_only) {
    std::printf("%s\n", plan_json);
    return 0;
  }

  std::error_code ec;
  std::filesystem::create_directories(f.dir, ec);
  const std::string fs = FsType(f.dir);
  if (!f.json) {
    std::printf("dir %s (%s); %zu buffers, %.1f MiB (%llu under 1 MiB, largest %.1f MiB); "
                "chunk %llu KiB, queue depth %zu, %d writer thread(s)\n",
                f.dir.c_str(), fs.c_str(), plan.size(), total / 1048576.0,
                static_cast<unsigned long long>(small), largest / 1048576.0,
                static_cast<unsigned long long>(f.chunk_kib), f.queue_depth, f.threads);
  }
  const std::vector<std::uint8_t> src = MakeSource(largest);

  std::vector<Result> results;
  std::vector<double> ratios;
  for (int round = f.first_round; round < f.first_round + f.rounds; ++round) {
    const std::string tag = std::to_string(::getpid()) + "-" + std::to_string(round);
    const std::string phos_dir = f.dir + "/phos-" + tag, posix_dir = f.dir + "/posix-" + tag;
    std::vector<std::string> order = {"phos", "posix"};
    if (round % 2 == 0) std::swap(order[0], order[1]);
    double phos_mbps = 0, posix_mbps = 0;
    for (const std::string& m : order) {
      if (!f.only.empty() && m != f.only) continue;
      if (f.settle_s > 0) {
        ::sync();
        std::this_thread::sleep_for(std::chrono::duration<double>(f.settle_s));
      }
      Result r;
      r.method = m;
      r.round = round;
      r.bytes = total;
      phos::Status s = m == "phos" ? RunPhos(f, plan, src, phos_dir, &r)
                                   : RunPosix(plan, src, posix_dir, &r);
      if (!s.ok()) {
        std::fprintf(stderr, "%s writer failed: %s\n", m.c_str(), s.ToString().c_str());
        std::filesystem::remove_all(phos_dir, ec);
        std::filesystem::remove_all(phos_dir + ".tmp", ec);
        std::filesystem::remove_all(posix_dir, ec);
        return 1;
      }
      (m == "phos" ? phos_mbps : posix_mbps) = r.mbps();
      if (!f.json) {
        std::printf("round %d  %-5s %8.1f MB/s  %7.3f s  (%s)\n", round, m.c_str(), r.mbps(),
                    r.seconds, r.backend.c_str());
        std::fflush(stdout);
      }
      results.push_back(r);
    }
    if (phos_mbps > 0 && posix_mbps > 0) ratios.push_back(phos_mbps / posix_mbps);
    if (f.verify) {
      phos::Status s = Verify(plan, src, f.only == "posix" ? "" : phos_dir,
                              f.only == "phos" ? "" : posix_dir);
      if (!s.ok()) {
        std::fprintf(stderr, "verify failed: %s\n", s.ToString().c_str());
        return 1;
      }
    }
    std::filesystem::remove_all(phos_dir, ec);
    std::filesystem::remove_all(posix_dir, ec);
  }

  std::vector<double> phos_v, posix_v;
  for (const Result& r : results) (r.method == "phos" ? phos_v : posix_v).push_back(r.mbps());
  const double ratio = Median(ratios);
  if (f.json) {
    std::printf("{\"dir\": \"%s\", \"fs\": \"%s\", \"chunk_kib\": %llu, \"queue_depth\": %zu, "
                "\"threads\": %d,\n \"plan\": %s,\n \"runs\": [",
                f.dir.c_str(), fs.c_str(), static_cast<unsigned long long>(f.chunk_kib),
                f.queue_depth, f.threads, plan_json);
    for (std::size_t i = 0; i < results.size(); ++i) {
      const Result& r = results[i];
      std::printf("%s\n  {\"method\": \"%s\", \"round\": %d, \"seconds\": %.6f, \"bytes\": %llu, "
                  "\"disk_bytes\": %llu, \"mbps\": %.1f, \"backend\": \"%s\"}",
                  i ? "," : "", r.method.c_str(), r.round, r.seconds,
                  static_cast<unsigned long long>(r.bytes),
                  static_cast<unsigned long long>(r.disk_bytes), r.mbps(), r.backend.c_str());
    }
    std::printf("],\n \"median_mbps\": {\"phos\": %.1f, \"posix\": %.1f}, "
                "\"median_ratio_phos_over_posix\": %.3f}\n",
                Median(phos_v), Median(posix_v), ratio);
  } else {
    std::printf("median  phos %.1f MB/s, file-per-buffer %.1f MB/s", Median(phos_v),
                Median(posix_v));
    if (!ratios.empty()) std::printf(", phos / file-per-buffer %.2fx (median of rounds)", ratio);
    std::printf("\n");
  }
  return 0;
}
