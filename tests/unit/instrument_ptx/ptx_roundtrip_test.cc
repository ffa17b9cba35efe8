// Corpus round trip: every PTX file parses; parse -> emit is idempotent; the
// emitted text assembles with ptxas to the same SASS as the original; cut or
// garbled files give a positioned error and never crash.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ptx/ptx_emitter.h"
#include "ptx/ptx_parser.h"

namespace phos::ptx {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> CorpusFiles() {
  std::vector<std::string> files;
  for (const char* dir : {PHOS_PTX_GENERATED_DIR, PHOS_PTX_HANDWRITTEN_DIR}) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".ptx") files.push_back(e.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out << data;
  return static_cast<bool>(out);
}

std::string TestName(const testing::TestParamInfo<std::string>& info) {
  std::string n = fs::path(info.param).stem().string();
  for (char& c : n)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

// "ptx:LINE:COL: expected ..., got ..." (no std::regex: GCC 12 warns in it under ASan).
bool IsErrorFormat(const Status& st) {
  if (st.code() != Status::Code::kCorruption) return false;
  const std::string& m = st.message();
  if (m.rfind("ptx:", 0) != 0) return false;
  size_t i = 4;
  for (int field = 0; field < 2; ++field) {
    size_t start = i;
    while (i < m.size() && isdigit(static_cast<unsigned char>(m[i]))) ++i;
    if (i == start || i >= m.size() || m[i] != ':') return false;
    ++i;
  }
  size_t expected = m.find(" expected ", i - 1);
  return expected == i && m.find(", got ", expected) != std::string::npos;
}

// ---- ELF: the SASS of a cubin is the contents of its .text.* sections ----

// Every section's bytes by name (SHT_NOBITS sections as "").
std::map<std::string, std::string> Sections(const std::string& elf) {
  std::map<std::string, std::string> out;
  auto rd = [&elf](size_t off, size_t n, void* dst) {
    if (off + n > elf.size() || off + n < off) return false;
    std::memcpy(dst, elf.data() + off, n);
    return true;
  };
  if (elf.size() < 64 || elf.compare(0, 4, "\x7f" "ELF") != 0 || elf[4] != 2) return out;
  uint64_t shoff = 0;
  uint16_t shentsize = 0, shnum = 0, shstrndx = 0;
  if (!rd(0x28, 8, &shoff) || !rd(0x3A, 2, &shentsize) || !rd(0x3C, 2, &shnum) || !rd(0x3E, 2, &shstrndx))
    return out;
  struct Sh { uint32_t name, type; uint64_t off, size; };
  std::vector<Sh> shs;
  for (uint16_t i = 0; i < shnum; ++i) {
    size_t base = shoff + static_cast<size_t>(i) * shentsize;
    Sh s{};
    if (!rd(base, 4, &s.name) || !rd(base + 4, 4, &s.type) || !rd(base + 0x18, 8, &s.off) || !rd(base + 0x20, 8, &s.size)) return {};
    shs.push_back(s);
  }
  if (shstrndx >= shs.size()) return out;
  const Sh& strtab = shs[shstrndx];
  for (const Sh& s : shs) {
    if (s.name >= strtab.size) continue;
    std::string name(elf.c_str() + strtab.off + s.name);
    if (s.type == 8 /* SHT_NOBITS */) out[name] = "";
    else if (s.off + s.size <= elf.size()) out[name] = elf.substr(s.off, s.size);
  }
  return out;
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/phos_ptx_XXXXXX";
    if (char* p = mkdtemp(tmpl)) path_ = p;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs ptxas; returns the cubin bytes or "" (with the log in *log).
std::string Assemble(const std::string& arch, const std::string& ptx_path, const std::string& cubin_path,
                     std::string* log) {
  std::string log_path = cubin_path + ".log";
  std::string cmd = std::string(PHOS_PTXAS) + " -arch=" + arch + " '" + ptx_path + "' -o '" + cubin_path +
                    "' > '" + log_path + "' 2>&1";
  int rc = std::system(cmd.c_str());
  *log = ReadFile(log_path);
  if (rc != 0) return "";
  return ReadFile(cubin_path);
}

class PtxCorpus : public testing::TestWithParam<std::string> {};

TEST_P(PtxCorpus, ParsesAndRoundTripsIdempotently) {
  std::string text = ReadFile(GetParam());
  ASSERT_FALSE(text.empty()) << GetParam();
  Module m;
  Status st = ParseModule(text, &m);
  ASSERT_TRUE(st.ok()) << GetParam() << ": " << st.ToString();
  EXPECT_FALSE(m.Kernels().empty());
  std::string e1 = EmitModule(m);
  Module m2;
  st = ParseModule(e1, &m2);
  ASSERT_TRUE(st.ok()) << "emitted text does not re-parse: " << st.ToString() << "\n" << e1;
  std::string e2 = EmitModule(m2);
  EXPECT_EQ(e1, e2) << "emit(parse(emit(x))) != emit(x) for " << GetParam();

  // Every instruction statement was decoded to a known opcode or kept whole.
  size_t instructions = 0;
  for (Function* f : m.Kernels())
    for (const auto& s : f->body)
      if (const auto* in = std::get_if<Instruction>(&s)) {
        ++instructions;
        EXPECT_FALSE(in->opcode.empty());
      }
  EXPECT_GT(instructions, 0u);
}

TEST_P(PtxCorpus, EmittedTextAssemblesToIdenticalSass) {
  if (std::string(PHOS_PTXAS).empty() || access(PHOS_PTXAS, X_OK) != 0) GTEST_SKIP() << "no ptxas";
  std::string text = ReadFile(GetParam());
  Module m;
  ASSERT_TRUE(ParseModule(text, &m).ok());
  ASSERT_FALSE(m.target.empty());
  std::string arch = m.target[0];
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  std::string orig_ptx = dir.path() + "/orig.ptx", emit_ptx = dir.path() + "/emit.ptx";
  ASSERT_TRUE(WriteFile(orig_ptx, text));
  ASSERT_TRUE(WriteFile(emit_ptx, EmitModule(m)));
  std::string log1, log2;
  std::string c1 = Assemble(arch, orig_ptx, dir.path() + "/orig.cubin", &log1);
  ASSERT_FALSE(c1.empty()) << "ptxas rejected the original: " << log1;
  std::string c2 = Assemble(arch, emit_ptx, dir.path() + "/emit.cubin", &log2);
  ASSERT_FALSE(c2.empty()) << "ptxas rejected the emitted text: " << log2;
  auto s1 = Sections(c1), s2 = Sections(c2);
  size_t text_sections = 0;
  for (const auto& [name, bytes] : s1) {
    auto it = s2.find(name);
    ASSERT_NE(it, s2.end()) << name << " missing after round trip";
    // With .loc directives ptxas embeds the PTX text itself and a SASS->PTX
    // line map; those describe the text, not the code, and may differ.
    if (name.rfind(".nv_debug_ptx_txt", 0) == 0 || name.rfind(".nv_debug_line_sass", 0) == 0 ||
        name.rfind(".rel.nv_debug_line_sass", 0) == 0) {
      continue;
    }
    if (name.rfind(".text.", 0) == 0) {
      ++text_sections;
      EXPECT_TRUE(it->second == bytes) << "SASS of " << name << " differs after round trip (" << arch << ")";
    } else {
      EXPECT_TRUE(it->second == bytes) << "section " << name << " differs after round trip (" << arch << ")";
    }
  }
  EXPECT_EQ(s1.size(), s2.size());
  EXPECT_GT(text_sections, 0u) << "no .text sections in the cubin";
  // Without .loc the whole cubin is byte-identical.
  if (s1.count(".nv_debug_ptx_txt") == 0) {
    EXPECT_TRUE(c1 == c2) << "cubin differs for " << GetParam();
  }
}

TEST_P(PtxCorpus, TruncatedTextFailsCleanly) {
  std::string text = ReadFile(GetParam());
  Module m;
  ASSERT_TRUE(ParseModule(text, &m).ok());
  // The first kernel's body: a cut inside it can never be valid PTX.
  size_t body = text.find(".entry");
  size_t open = text.find('{', body);
  ASSERT_NE(open, std::string::npos);
  size_t close = text.find("\n}", open);  // function bodies end with '}' in column 0
  ASSERT_NE(close, std::string::npos);
  const size_t cuts = 300;
  size_t failures = 0;
  for (size_t i = 0; i <= cuts; ++i) {
    size_t at = text.size() * i / cuts;
    Module cut;
    Status st = ParseModule(std::string_view(text).substr(0, at), &cut);
    if (!st.ok()) {
      ++failures;
      EXPECT_TRUE(IsErrorFormat(st)) << "cut at " << at << ": " << st.ToString();
    } else {
      // A cut inside the first kernel's body can never parse.
      EXPECT_FALSE(at > open && at <= close) << "cut at " << at << " inside the first kernel parsed OK";
    }
  }
  EXPECT_GT(failures, cuts / 2);
}

TEST_P(PtxCorpus, MutatedTextNeverCrashes) {
  std::string text = ReadFile(GetParam());
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 200; ++iter) {
    std::string t = text;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !t.empty(); ++e) {
      size_t at = rng() % t.size();
      switch (rng() % 4) {
        case 0: t[at] = static_cast<char>(rng() & 0xff); break;
        case 1: t.erase(at, 1 + rng() % 16); break;
        case 2: t.insert(at, 1, "{}[]();,.%@!|<>=+-\"/*0fx"[rng() % 24]); break;
        case 3: t.insert(at, t.substr(rng() % t.size(), rng() % 32)); break;
      }
    }
    Module m;
    Status st = ParseModule(t, &m);
    if (!st.ok()) {
      EXPECT_TRUE(IsErrorFormat(st)) << st.ToString();
    } else {
      Module m2;  // whatever parsed must re-emit to parseable text
      EXPECT_TRUE(ParseModule(EmitModule(m), &m2).ok());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Files, PtxCorpus, testing::ValuesIn(CorpusFiles()), TestName);

TEST(PtxCorpusCoverage, HasNvccOutputForEveryArch) {
  auto files = CorpusFiles();
  for (const char* arch : {"_sm75.ptx", "_sm80.ptx", "_sm90.ptx"}) {
    size_t n = std::count_if(files.begin(), files.end(), [arch](const std::string& f) {
      return f.size() > strlen(arch) && f.compare(f.size() - strlen(arch), std::string::npos, arch) == 0;
    });
    if (std::string(PHOS_PTXAS).empty()) GTEST_SKIP() << "no CUDA toolkit: nvcc corpus not generated";
    EXPECT_GE(n, 10u) << arch;
  }
}

TEST(PtxGarbage, RandomBytesAndTokenSoupFailCleanly) {
  std::mt19937 rng(42);
  static const char* kTokens[] = {
      ".version", "9.0", ".target", "sm_90", ".address_size", "64", ".entry", ".func", ".visible",
      ".param", ".reg", ".b32", ".u64", "%r<4>", "%r1", "%rd2", "foo", "(", ")", "{", "}", "[", "]",
      ",", ";", ":", "@", "!", "|", "+", "-", "=", "0f3F800000", "0d3FF0000000000000", "0x10", "12",
      "ld.global.u32", "bra", "$L1", "\"s\"", ".loc", ".file", ".pragma", ".align", "<", ">", "\n"};
  for (int iter = 0; iter < 2000; ++iter) {
    std::string t;
    if (iter % 2 == 0) {
      size_t n = rng() % 256;
      for (size_t i = 0; i < n; ++i) t += static_cast<char>(rng() & 0xff);
    } else {
      size_t n = rng() % 96;
      for (size_t i = 0; i < n; ++i) {
        t += kTokens[rng() % std::size(kTokens)];
        t += ' ';
      }
    }
    Module m;
    Status st = ParseModule(t, &m);
    if (!st.ok()) {
      EXPECT_TRUE(IsErrorFormat(st)) << st.ToString() << "\ninput: " << t;
    }
  }
}

}  // namespace
}  // namespace phos::ptx
