#include "link_record.h"

#include <cstring>

namespace phos::jit {
namespace {

std::string KindName(const LinkInput& in) {
  if (in.is_ptx) return "PTX";
  switch (in.type) {
    case InputType::kCubin: return "a cubin";
    case InputType::kLtoIr: return "LTO-IR";
    case InputType::kFatbin: return "a fatbin";
    case InputType::kObject: return "a host object";
    case InputType::kLibrary: return "a library";
    case InputType::kIndex: return "an index file";
    case InputType::kAny: return "an input of type ANY that is not PTX";
    default: return "an input of type " + std::to_string(static_cast<int>(in.type));
  }
}

// libcudadevrt.a by the name it was added under (numba passes the file's
// name with its bytes; nvJitLinkAddFile gives the path).
bool IsDeviceRuntimeLibrary(InputType type, const char* name, const char* file) {
  if (type != InputType::kLibrary && type != InputType::kAny) return false;
  for (const char* n : {name, file}) {
    if (n == nullptr) continue;
    const std::string_view v(n);
    const size_t slash = v.rfind('/');
    if ((slash == std::string_view::npos ? v : v.substr(slash + 1)) == "libcudadevrt.a") return true;
  }
  return false;
}

bool HasLto(const std::vector<std::string>& options) {
  for (const std::string& o : options)
    if (o == "-lto") return true;
  return false;
}

}  // namespace

bool LooksLikePtx(std::string_view bytes) {
  if (bytes.size() >= 4 && (std::memcmp(bytes.data(), "\x7f" "ELF", 4) == 0 ||
                            std::memcmp(bytes.data(), "\x50\xed\x55\xba", 4) == 0))
    return false;
  if (bytes.rfind("!<arch>", 0) == 0) return false;
  const std::string_view text = bytes.substr(0, bytes.find('\0'));
  return text.find(".version") != std::string_view::npos && text.find(".target") != std::string_view::npos;
}

void LinkRecord::SetOptions(uint32_t n, const char* const* options) {
  options_.clear();
  for (uint32_t i = 0; options != nullptr && i < n; ++i)
    if (options[i] != nullptr) options_.emplace_back(options[i]);
}

void LinkRecord::Add(InputType type, std::string_view bytes, const char* name, const char* file) {
  LinkInput in;
  in.type = type;
  in.is_ptx = type == InputType::kPtx || (type == InputType::kAny && LooksLikePtx(bytes));
  in.is_ltoir = type == InputType::kLtoIr;
  in.is_device_runtime = !in.is_ptx && IsDeviceRuntimeLibrary(type, name, file);
  // Only what a PTX source can come from is kept (a relink re-adds files by path).
  if (in.is_ptx) in.bytes.assign(bytes.substr(0, bytes.find('\0')));
  else if (in.is_ltoir) in.bytes.assign(bytes);
  if (name != nullptr) in.name = name;
  if (file != nullptr) in.file = file;
  inputs_.push_back(std::move(in));
}

namespace {
// A link's inputs by kind; CUDA's device runtime library counts as none.
struct Tally {
  size_t ptx = 0, ltoir = 0;
  const LinkInput* first_ptx = nullptr;
  const LinkInput* blocker = nullptr;  // the first input that is neither PTX nor LTO-IR
};
Tally Count(const std::vector<LinkInput>& inputs) {
  Tally t;
  for (const LinkInput& in : inputs) {
    if (in.is_device_runtime) continue;
    if (in.is_ptx) {
      if (t.ptx++ == 0) t.first_ptx = &in;
    } else if (in.is_ltoir) {
      ++t.ltoir;
    } else if (t.blocker == nullptr) {
      t.blocker = &in;
    }
  }
  return t;
}
bool IsSinglePtx(const Tally& t) { return t.blocker == nullptr && t.ptx == 1 && t.ltoir == 0; }
}  // namespace

PtxSource LinkRecord::Source() const {
  const Tally t = Count(inputs_);
  if (t.blocker != nullptr) return PtxSource::kNone;
  if (IsSinglePtx(t)) return PtxSource::kSinglePtx;
  if (t.ltoir > 0 && !HasLto(options_)) return PtxSource::kNone;
  if (t.ptx == 0) return t.ltoir > 0 ? PtxSource::kLtoRelink : PtxSource::kNone;
  return PtxSource::kPtxLink;
}

std::string LinkRecord::Why() const {
  if (inputs_.empty()) return "no inputs";
  const Tally t = Count(inputs_);
  if (t.blocker != nullptr)
    return std::to_string(inputs_.size()) + " input(s): " + KindName(*t.blocker) + (inputs_.size() > 1 ? " among others" : "");
  if (t.ltoir > 0 && !HasLto(options_)) return "LTO-IR without -lto";
  if (t.ltoir == 0 && t.ptx == 0) return "only CUDA's device runtime library";
  return std::to_string(t.ptx) + " PTX and " + std::to_string(t.ltoir) + " LTO-IR input(s)";
}

std::string_view LinkRecord::single_ptx() const {
  const Tally t = Count(inputs_);
  return IsSinglePtx(t) ? std::string_view(t.first_ptx->bytes) : std::string_view();
}

}  // namespace phos::jit
