// SignatureCache: memory hits, disk round trips, corrupt files, per-fatbin
// separation, concurrent use.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "signature/signature_cache.h"

namespace phos::signature {
namespace {

namespace fs = std::filesystem;

// Real nvcc 13 names and .nv.info tables (see signature_test.cc).
std::vector<KernelRequest> Requests() {
  return {
      {"_Z2tkIfEvPKT_PS0_i", {{0, 0, 8}, {1, 8, 8}, {2, 16, 4}}, true},
      {"_Z2tkIdEvPKT_PS0_i", {{0, 0, 8}, {1, 8, 8}, {2, 16, 4}}, true},
      {"_Z2ppPPfPKPKfi", {{0, 0, 8}, {1, 8, 8}, {2, 16, 4}}, true},
      {"_Z7structk4PtrsPS_", {{0, 0, 24}, {1, 24, 8}}, true},
      {"_Z6refargIRKfEv4WrapIT_EPf", {}, false},
      {"ck", {{0, 0, 8}, {1, 8, 4}, {2, 16, 8}, {3, 24, 24}}, true},
      {"noargs", {}, true},
  };
}

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = (fs::temp_directory_path() /
             ("phos_sigcache_" + std::to_string(::getpid()) + "_" + info->name()))
                .string();
    fs::remove_all(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

constexpr uint64_t kHashA = 0x1111222233334444ull;
constexpr uint64_t kHashB = 0xaaaabbbbccccddddull;

TEST(SignatureCache, HashIsXxh3OfTheBytes) {
  std::vector<uint8_t> a = {0x50, 0xed, 0x55, 0xba, 1, 2, 3};
  std::vector<uint8_t> b = a;
  b.back() = 4;
  EXPECT_EQ(SignatureCache::HashFatbin(a), SignatureCache::HashFatbin(a));
  EXPECT_NE(SignatureCache::HashFatbin(a), SignatureCache::HashFatbin(b));
  EXPECT_EQ(SignatureCache::CacheFilePath("/d", 0x1f), "/d/000000000000001f.sig");
}

TEST(SignatureCache, MemoryHit) {
  SignatureCache cache;
  auto reqs = Requests();
  KernelSignature first, second;
  ASSERT_TRUE(cache.Resolve(kHashA, reqs[0], &first).ok());
  ASSERT_TRUE(cache.Resolve(kHashA, reqs[0], &second).ok());
  EXPECT_EQ(first, second);
  EXPECT_EQ(first.params[0].role, AccessRole::kRead);
  auto st = cache.stats();
  EXPECT_EQ(st.resolved, 1u);
  EXPECT_EQ(st.memory_hits, 1u);
  EXPECT_EQ(st.disk_hits, 0u);
  EXPECT_TRUE(cache.Flush().ok());  // no directory: nothing to do
  EXPECT_EQ(cache.stats().files_written, 0u);

  // The same name with another .nv.info table is a different request.
  KernelRequest other = reqs[0];
  other.kparams.pop_back();
  KernelSignature third;
  ASSERT_TRUE(cache.Resolve(kHashA, other, &third).ok());
  EXPECT_EQ(cache.stats().resolved, 2u);
  EXPECT_EQ(third.params.size(), 2u);

  // Errors are returned and not cached.
  KernelSignature bad;
  EXPECT_EQ(cache.Resolve(kHashA, KernelRequest{"ck", {}, false}, &bad).code(), Status::Code::kNotFound);
  EXPECT_EQ(cache.Resolve(kHashA, KernelRequest{"ck", {}, false}, &bad).code(), Status::Code::kNotFound);
}

TEST(SignatureCache, DiskRoundTrip) {
  TempDir dir;
  auto reqs = Requests();
  std::vector<KernelSignature> fresh;
  {
    SignatureCache cache(dir.path());
    std::vector<Status> sts;
    ASSERT_TRUE(cache.ResolveAll(kHashA, reqs, &fresh, &sts).ok());
    EXPECT_EQ(cache.stats().resolved, reqs.size());
    EXPECT_EQ(cache.stats().files_written, 1u);
  }
  std::string path = SignatureCache::CacheFilePath(dir.path(), kHashA);
  ASSERT_TRUE(fs::exists(path));
  std::string bytes = ReadAll(path);
  EXPECT_EQ(bytes.rfind("phos-kernel-signatures 1\n", 0), 0u);
  // No temporary files left behind.
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1u);

  SignatureCache again(dir.path());
  std::vector<KernelSignature> cached;
  ASSERT_TRUE(again.ResolveAll(kHashA, reqs, &cached).ok());
  auto st = again.stats();
  EXPECT_EQ(st.resolved, 0u);
  EXPECT_EQ(st.files_loaded, 1u);
  EXPECT_EQ(st.disk_hits, reqs.size());
  EXPECT_EQ(st.files_written, 0u);  // nothing new
  ASSERT_EQ(cached.size(), fresh.size());
  for (size_t i = 0; i < fresh.size(); ++i) EXPECT_EQ(cached[i], fresh[i]) << reqs[i].mangled_name;

  // Serialize/Deserialize directly, including odd strings.
  std::map<std::string, SignatureCache::Entry> m, back;
  KernelSignature odd;
  odd.mangled_name = "weird name\nwith newline";
  odd.demangled = "x 12 y";
  odd.params.push_back(ParamAccess{0, 0, 8, true, AccessRole::kReadWrite, true, true, "a b\n c"});
  m[odd.mangled_name] = SignatureCache::Entry{KernelRequest{odd.mangled_name, {{0, 0, 8}}, true}, odd, false};
  ASSERT_TRUE(SignatureCache::Deserialize(SignatureCache::Serialize(kHashB, m), kHashB, &back).ok());
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back.begin()->second.signature, odd);
  EXPECT_EQ(back.begin()->second.request, m.begin()->second.request);
}

TEST(SignatureCache, CorruptFileIsIgnoredAndRewritten) {
  TempDir dir;
  auto reqs = Requests();
  std::vector<KernelSignature> good;
  {
    SignatureCache cache(dir.path());
    ASSERT_TRUE(cache.ResolveAll(kHashA, reqs, &good).ok());
  }
  std::string path = SignatureCache::CacheFilePath(dir.path(), kHashA);
  const std::string valid = ReadAll(path);

  std::vector<std::string> corruptions;
  corruptions.push_back("garbage");
  corruptions.push_back("");
  corruptions.push_back(valid.substr(0, valid.size() / 2));  // truncated
  std::string flipped = valid;
  flipped[flipped.find("readwrite")] = 'X';  // checksum catches it
  corruptions.push_back(flipped);
  std::string version = valid;
  version.replace(version.find(" 1\n"), 3, " 9\n");
  corruptions.push_back(version);

  for (const auto& bad : corruptions) {
    WriteAll(path, bad);
    {
      SignatureCache cache(dir.path());
      std::vector<KernelSignature> out;
      ASSERT_TRUE(cache.ResolveAll(kHashA, reqs, &out).ok());
      auto st = cache.stats();
      EXPECT_EQ(st.corrupt_files, 1u);
      EXPECT_EQ(st.resolved, reqs.size());  // nothing trusted
      EXPECT_EQ(st.files_written, 1u);      // rewritten
      ASSERT_EQ(out.size(), good.size());
      for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], good[i]);
    }
    EXPECT_EQ(ReadAll(path), valid);
  }

  // A single Resolve after a corrupt file is enough to get it rewritten
  // (by the destructor's flush).
  WriteAll(path, "garbage");
  {
    SignatureCache cache(dir.path());
    KernelSignature s;
    ASSERT_TRUE(cache.Resolve(kHashA, reqs[0], &s).ok());
    EXPECT_EQ(cache.stats().corrupt_files, 1u);
  }  // destructor flushes
  SignatureCache check(dir.path());
  KernelSignature s;
  ASSERT_TRUE(check.Resolve(kHashA, reqs[0], &s).ok());
  EXPECT_EQ(check.stats().corrupt_files, 0u);
  EXPECT_EQ(check.stats().disk_hits, 1u);
}

TEST(SignatureCache, DifferentFatbinsDoNotMix) {
  TempDir dir;
  KernelRequest a{"_Z2tkIfEvPKT_PS0_i", {{0, 0, 8}, {1, 8, 8}, {2, 16, 4}}, true};
  {
    SignatureCache cache(dir.path());
    KernelSignature s;
    ASSERT_TRUE(cache.Resolve(kHashA, a, &s).ok());
    ASSERT_TRUE(cache.Resolve(kHashB, a, &s).ok());
    EXPECT_EQ(cache.stats().resolved, 2u);  // no cross-fatbin hit
    EXPECT_EQ(cache.stats().memory_hits, 0u);
    ASSERT_TRUE(cache.Flush().ok());
    EXPECT_EQ(cache.stats().files_written, 2u);
  }
  std::string pa = SignatureCache::CacheFilePath(dir.path(), kHashA);
  std::string pb = SignatureCache::CacheFilePath(dir.path(), kHashB);
  ASSERT_TRUE(fs::exists(pa));
  ASSERT_TRUE(fs::exists(pb));
  // A file copied under another fatbin's name names the wrong fatbin.
  fs::copy_file(pa, pb, fs::copy_options::overwrite_existing);
  SignatureCache cache(dir.path());
  KernelSignature s;
  ASSERT_TRUE(cache.Resolve(kHashB, a, &s).ok());
  EXPECT_EQ(cache.stats().corrupt_files, 1u);
  ASSERT_TRUE(cache.Resolve(kHashA, a, &s).ok());
  EXPECT_EQ(cache.stats().disk_hits, 1u);
  // A kernel cached under A only is unknown under B.
  KernelRequest only_a{"_Z2ppPPfPKPKfi", {{0, 0, 8}, {1, 8, 8}, {2, 16, 4}}, true};
  ASSERT_TRUE(cache.Resolve(kHashA, only_a, &s).ok());
  uint64_t before = cache.stats().resolved;
  ASSERT_TRUE(cache.Resolve(kHashB, only_a, &s).ok());
  EXPECT_EQ(cache.stats().resolved, before + 1);
}

TEST(SignatureCache, ConcurrentResolve) {
  TempDir dir;
  auto reqs = Requests();
  std::vector<KernelSignature> want(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(ResolveKernelSignature(reqs[i].mangled_name, reqs[i].kparams, &want[i]).ok() ||
                reqs[i].mangled_name == "noargs");
  }
  std::vector<KernelSignature> noargs;
  std::vector<Status> sts;
  ResolveKernelSignatures({reqs.back()}, &noargs, &sts);
  want.back() = noargs[0];

  SignatureCache cache(dir.path());
  constexpr int kThreads = 8;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint64_t hash = t % 2 ? kHashA : kHashB;
      for (int round = 0; round < 3; ++round) {
        if (t % 3 == 0) {
          std::vector<KernelSignature> out;
          if (!cache.ResolveAll(hash, reqs, &out).ok()) ++failures[t];
          for (size_t i = 0; i < reqs.size(); ++i)
            if (!(out[i] == want[i])) ++failures[t];
        } else {
          for (size_t i = 0; i < reqs.size(); ++i) {
            size_t k = (i + t) % reqs.size();
            KernelSignature s;
            if (!cache.Resolve(hash, reqs[k], &s).ok() || !(s == want[k])) ++failures[t];
          }
          if (!cache.Flush().ok()) ++failures[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
  ASSERT_TRUE(cache.Flush().ok());
  // Both files are valid and complete.
  for (uint64_t h : {kHashA, kHashB}) {
    SignatureCache check(dir.path());
    std::vector<KernelSignature> out;
    ASSERT_TRUE(check.ResolveAll(h, reqs, &out).ok());
    EXPECT_EQ(check.stats().resolved, 0u);
    EXPECT_EQ(check.stats().corrupt_files, 0u);
  }
}

}  // namespace
}  // namespace phos::signature
