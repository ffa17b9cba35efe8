#include "session/kernel_access.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>

#include "fatbin/fatbin_reader.h"
#include "fatbin/nv_info.h"
#include "ptx/ptx_ir.h"
#include "ptx/ptx_parser.h"
#include "session/buffer_map.h"
#include "signature/kernel_signature.h"
#include "ptx/device_runtime.h"
#include "signature/signature_cache.h"
#include "twin/twin_pass.h"

namespace phos::session {
namespace {

// Calls stop(line) for each line of `text` until it returns true; whether one did.
template <typename Stop>
bool ForEachLine(std::string_view text, Stop&& stop) {
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    if (stop(text.substr(pos, end - pos))) return true;
    pos = end + 1;
  }
  return false;
}

// Calls stop(name) for each function the PTX declares `.extern .func`
// until it returns true; whether one did. nvcc writes each declaration's
// first line as `.extern .func  (.param .b64 func_retval0) malloc` or
// `.extern .func free`, the parameter list on the following lines; a name
// not on that line is passed as "".
template <typename Stop>
bool ForEachExternFunction(std::string_view ptx, Stop&& stop) {
  return ForEachLine(ptx, [&stop](std::string_view line) {
    const std::size_t i = line.find_first_not_of(" \t");
    if (i == std::string_view::npos || line.substr(i).rfind(".extern", 0) != 0 ||
        line.find(".func") == std::string_view::npos) {
      return false;
    }
    // The function's name: the first word after the return list, if any.
    std::string_view rest = line.substr(line.find(".func") + 5);
    if (const std::size_t close = rest.find(')'); close != std::string_view::npos && rest.find('(') < close) {
      rest = rest.substr(close + 1);
    }
    const std::size_t b = rest.find_first_not_of(" \t");
    if (b == std::string_view::npos) return stop(std::string_view());
    rest = rest.substr(b);
    return stop(rest.substr(0, rest.find_first_of(" \t(;")));
  });
}

constexpr uint32_t kFatbinContainerMagic = 0xBA55ED50u;  // fatbin_format.h
constexpr unsigned char kElfMagic[4] = {0x7f, 'E', 'L', 'F'};

// What the image says about its kernels.
struct ImageKernels {
  fatbin::CubinInfo cubin;  // every cubin's tables; the first naming a kernel wins
  std::string ptx;          // the first PTX text
  bool has_ptx = false;
};

void MergeCubin(std::span<const uint8_t> elf, ImageKernels* out) {
  fatbin::CubinInfo ci;
  if (Status s = fatbin::ReadCubinInfo(elf, &ci); !s.ok()) {
    spdlog::warn("kernel access sets: unreadable cubin in a module image: {}", s.ToString());
    return;
  }
  for (auto& k : ci.kernels)
    if (out->cubin.Find(k.name) == nullptr) out->cubin.kernels.push_back(std::move(k));
}

Status ReadImage(std::span<const uint8_t> bytes, ImageKernels* out) {
  if (bytes.size() >= 4 && std::memcmp(bytes.data(), kElfMagic, 4) == 0) {
    MergeCubin(bytes, out);
    return Status::Ok();
  }
  uint32_t magic = 0;
  if (bytes.size() >= 4) std::memcpy(&magic, bytes.data(), 4);
  if (magic == kFatbinContainerMagic) {
    fatbin::Fatbin fb;
    PHOS_RETURN_IF_ERROR(fatbin::ParseFatbin(bytes, &fb));
    for (const auto& e : fb.entries) {
      if (e.is_elf()) {
        MergeCubin(e.contents, out);
      } else if (e.is_ptx()) {
        out->has_ptx = true;
        if (out->ptx.empty()) out->ptx = std::string(e.ptx_text());
      }
    }
    return Status::Ok();
  }
  const auto* text = reinterpret_cast<const char*>(bytes.data());
  std::string ptx(text, strnlen(text, bytes.size()));
  if (ptx.find(".version") == std::string::npos) {
    return Status::InvalidArgument("module image is neither a fatbin, a cubin nor PTX text");
  }
  out->ptx = std::move(ptx);
  out->has_ptx = true;
  return Status::Ok();
}

// PTX `.entry` parameter list -> (ordinal, offset, size), the layout rules
// of the .param state space (each parameter aligned to its .align or its
// element size).
std::vector<signature::ParamInfo> PtxLayout(const ptx::Function& f) {
  std::vector<signature::ParamInfo> out;
  uint32_t offset = 0;
  for (const ptx::VarDecl& d : f.params) {
    const uint32_t elem = static_cast<uint32_t>(std::max(ptx::TypeBits(d.type), 8) / 8) * d.vec;
    uint32_t count = 1;
    for (int64_t dim : d.dims) count *= dim > 0 ? static_cast<uint32_t>(dim) : 1u;
    const uint32_t align = d.align.value_or(elem);
    if (align > 1) offset = (offset + align - 1) / align * align;
    out.push_back({static_cast<uint32_t>(out.size()), offset, elem * count});
    offset += elem * count;
  }
  return out;
}

// The size-only rule (instrument/signature's, for a signature that failed
// to resolve): 8 bytes = candidate pointer, larger = scanned, smaller = none.
signature::KernelSignature SizeOnly(const signature::KernelRequest& req) {
  signature::KernelSignature sig;
  sig.mangled_name = req.mangled_name;
  sig.from_nv_info = true;
  for (const auto& k : req.kparams) {
    signature::ParamAccess a;
    a.ordinal = k.ordinal;
    a.offset = k.offset;
    a.size = k.size;
    a.layout_known = true;
    a.role = k.size == 8   ? signature::AccessRole::kReadWrite
             : k.size > 8 ? signature::AccessRole::kScanWords
                          : signature::AccessRole::kNone;
    sig.params.push_back(a);
  }
  std::sort(sig.params.begin(), sig.params.end(),
            [](const auto& a, const auto& b) { return a.ordinal < b.ordinal; });
  return sig;
}

std::shared_ptr<KernelAccessPlan> PlanFrom(const signature::KernelSignature& sig, AccessKind kind) {
  auto plan = std::make_shared<KernelAccessPlan>();
  plan->name = sig.mangled_name;
  plan->kind = kind;
  plan->typed = sig.fully_typed && !sig.extern_c;
  for (const auto& p : sig.params) {
    if (!p.layout_known) {  // a parameter we cannot place: nothing after it can be placed either
      plan->kind = AccessKind::kUnknown;
      plan->probes.clear();
      break;
    }
    plan->param_bytes = std::max(plan->param_bytes, p.offset + p.size);
    switch (p.role) {
      case signature::AccessRole::kNone: break;
      case signature::AccessRole::kRead:
      case signature::AccessRole::kReadWrite:
        if (p.size == 8) plan->probes.push_back({p.offset, p.ordinal, p.role == signature::AccessRole::kReadWrite, false});
        break;
      case signature::AccessRole::kScanWords:
        for (uint32_t w = 0; w < signature::ScanWordCount(p.size); ++w) {
          plan->probes.push_back({p.offset + 8 * w, p.ordinal, true, true});
        }
        break;
    }
  }
  plan->word_hits.assign(plan->probes.size(), 0);
  return plan;
}

}  // namespace

std::shared_ptr<KernelAccessPlan> UnknownKernelPlan(const std::string& name) {
  auto plan = std::make_shared<KernelAccessPlan>();
  plan->name = name;
  plan->kind = AccessKind::kUnknown;
  return plan;
}

Status BuildModuleKernels(std::span<const std::byte> image, signature::SignatureCache* cache, ModuleKernels* out) {
  out->kernels.clear();
  const auto bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(image.data()), image.size());
  ImageKernels ik;
  PHOS_RETURN_IF_ERROR(ReadImage(bytes, &ik));
  out->has_ptx = ik.has_ptx;
  out->may_have_variables = ik.ptx.empty() || PtxDeclaresModuleVariables(ik.ptx);
  if (!ik.ptx.empty()) out->variables = PtxModuleVariableNames(ik.ptx);
  out->may_use_textures = ik.ptx.empty() || PtxUsesTextures(ik.ptx);
  // Without PTX only a GPU runs the module, and its driver keeps its own heap.
  out->uses_device_heap = !ik.ptx.empty() && PtxUsesDeviceHeap(ik.ptx);
  // Which kernels call cudaGraphSetConditional, from the PTX's call graph
  // (all of them when it cannot be parsed): only those are of unknown
  // access and need a backend with phos's handles; their module's other
  // kernels run anywhere (refusing them all stopped checkpoint_app's
  // plain steps on a GPU, docs/gpu-report.md third session).
  std::optional<std::set<std::string>> setters;
  if (!ik.ptx.empty()) setters = KernelsSettingGraphConditionals(ik.ptx);
  const bool all_may_set = !ik.ptx.empty() && !setters.has_value();
  out->sets_graph_conditionals = all_may_set || (setters.has_value() && !setters->empty());

  std::vector<signature::KernelRequest> requests;
  for (const auto& k : ik.cubin.kernels) {
    signature::KernelRequest r;
    r.mangled_name = k.name;
    r.has_nv_info = true;
    for (const auto& p : k.params) r.kparams.push_back({p.ordinal, p.offset, p.size});
    requests.push_back(std::move(r));
  }
  // Kernels no cubin describes (a PTX-only image): the PTX `.entry` lists.
  if (requests.empty() && !ik.ptx.empty()) {
    ptx::Module mod;
    PHOS_RETURN_IF_ERROR(ptx::ParseModule(ik.ptx, &mod).WithContext("kernel access sets: PTX of a module image"));
    for (ptx::Function* f : mod.Kernels()) {
      signature::KernelRequest r;
      r.mangled_name = f->name;
      r.has_nv_info = true;  // the .entry list is the complete layout
      r.kparams = PtxLayout(*f);
      requests.push_back(std::move(r));
    }
  }
  if (requests.empty()) return Status::Ok();

  std::vector<signature::KernelSignature> sigs;
  std::vector<Status> statuses;
  // No cache given (tests, benchmarks): a memory-only one for this call.
  std::unique_ptr<signature::SignatureCache> local;
  if (cache == nullptr) {
    local = std::make_unique<signature::SignatureCache>();
    cache = local.get();
  }
  (void)cache->ResolveAll(signature::SignatureCache::HashFatbin(bytes), requests, &sigs, &statuses);
  const AccessKind kind = ik.has_ptx ? AccessKind::kSpeculated : AccessKind::kUnvalidatable;
  const std::map<std::string, std::string> unchecked =
      ik.has_ptx ? UncheckedKernels(ik.ptx) : std::map<std::string, std::string>{};
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::string& name = requests[i].mangled_name;
    std::shared_ptr<KernelAccessPlan> plan;
    if (!statuses[i].ok()) {
      spdlog::warn("kernel {}: signature not resolved ({}); every 8-byte parameter is a candidate pointer", name,
                   statuses[i].ToString());
      plan = PlanFrom(SizeOnly(requests[i]), kind);
    } else {
      plan = PlanFrom(sigs[i], kind);
    }
    if (all_may_set || (setters.has_value() && setters->count(name) != 0)) {
      // Which slot a cudaGraphSetConditional writes is the handle's value,
      // known only when the kernel runs: assume any buffer.
      plan->kind = AccessKind::kUnknown;
      plan->sets_graph_conditionals = true;
      plan->unvalidatable_reason = "it calls cudaGraphSetConditional (writes a conditional handle's slot)";
    } else if (plan->kind == AccessKind::kUnvalidatable) {
      plan->unvalidatable_reason = "the module has no PTX (SASS only): no twin can be built";
    } else if (auto u = unchecked.find(name); u != unchecked.end() && plan->kind == AccessKind::kSpeculated) {
      plan->kind = AccessKind::kUnvalidatable;
      plan->unvalidatable_reason = "its twin cannot check " + u->second;
      spdlog::warn("kernel {} is unvalidatable: {}", name, plan->unvalidatable_reason);
    }
    out->kernels[name] = std::move(plan);
  }
  if (spdlog::should_log(spdlog::level::debug)) {
    size_t typed = 0;
    for (const auto& [name, plan] : out->kernels) typed += plan->typed ? 1 : 0;
    spdlog::debug("kernel access plans: {} kernels ({} typed), {}", out->kernels.size(), typed,
                  ik.has_ptx ? "PTX present (speculated)" : "no PTX (unvalidatable)");
  }
  return Status::Ok();
}

std::map<std::string, std::string> UncheckedKernels(std::string_view ptx) {
  std::map<std::string, std::string> out;
  // What can go unchecked in write mode (twin_pass.h): tensor-map copies,
  // multimem, tensormap.replace, a wmma store, a call of an external
  // function the device runtime does not provide (a name this scan cannot
  // read counts as one). printf/assert/heap externs alone need no parse.
  bool may = ForEachExternFunction(
      ptx, [](std::string_view name) { return name.empty() || !ptx::IsKnownDeviceRuntimeFunction(name); });
  for (std::string_view family : {".tensor", "multimem.", "tensormap.", "wmma.store"}) {
    may = may || ptx.find(family) != std::string_view::npos;
  }
  if (!may) return out;
  ptx::Module mod, twin;
  twin::TwinInfo info;
  twin::TwinOptions opts;
  opts.mode = twin::TwinMode::kWrites;
  Status s = ptx::ParseModule(ptx, &mod);
  if (s.ok()) s = twin::MakeTwin(mod, opts, &twin, &info);
  if (!s.ok()) {
    spdlog::debug("unchecked accesses not analysed: {}", s.ToString());
    return out;
  }
  for (const twin::FunctionTwinInfo& f : info.functions) {
    if (!f.is_entry) continue;
    if (auto why = info.UncheckedReason(f.name)) out.emplace(f.name, std::move(*why));
  }
  return out;
}

bool PtxUsesTextures(std::string_view ptx) {
  for (std::string_view name : {"tex.", "tld4.", "txq.", "suld.", "sust.", "sured.", "suq."}) {
    for (std::size_t pos = ptx.find(name); pos != std::string_view::npos; pos = ptx.find(name, pos + 1)) {
      const char before = pos == 0 ? ' ' : ptx[pos - 1];
      // An instruction starts a statement: after blanks, a label, a guard
      // (`@%p1 tex...`) or a brace.
      if (before == ' ' || before == '\t' || before == '\n' || before == '{' || before == ';' || before == ':') {
        return true;
      }
    }
  }
  return false;
}

bool PtxSetsGraphConditionals(std::string_view ptx) {
  return ForEachExternFunction(ptx, [](std::string_view name) { return ptx::IsGraphConditionalFunction(name); });
}

std::optional<std::set<std::string>> KernelsSettingGraphConditionals(std::string_view ptx) {
  std::set<std::string> out;
  if (!PtxSetsGraphConditionals(ptx)) return out;
  ptx::Module mod;
  if (Status s = ptx::ParseModule(ptx, &mod); !s.ok()) {
    spdlog::debug("which kernels set graph conditionals not analysed: {}", s.ToString());
    return std::nullopt;
  }
  // The call graph: each function's direct callees, and whether it calls
  // through a pointer (a target this scan cannot name: counted as a setter).
  struct Calls {
    std::set<std::string> callees;
    bool indirect = false;
  };
  std::map<std::string, Calls> calls;
  std::vector<std::string> entries;
  for (const ptx::TopItem& item : mod.items) {
    const auto* f = std::get_if<ptx::Function>(&item);
    if (f == nullptr || !f->has_body) continue;
    if (f->is_entry) entries.push_back(f->name);
    Calls& c = calls[f->name];
    for (const ptx::Statement& st : f->body) {
      const auto* in = std::get_if<ptx::Instruction>(&st);
      if (in == nullptr || in->info.op != ptx::Opcode::kCall) continue;
      // The target is the first symbol or register operand (the return
      // list, when there is one, comes before it).
      for (const ptx::Operand& o : in->operands) {
        if (o.kind == ptx::Operand::Kind::kSymbol) {
          c.callees.insert(o.name);
          break;
        }
        if (o.kind == ptx::Operand::Kind::kRegister) {
          c.indirect = true;
          break;
        }
      }
    }
  }
  // Memoised depth-first walk; a function on the current path (recursion)
  // counts as not setting until its other calls say otherwise.
  std::map<std::string, bool> sets;
  std::function<bool(const std::string&)> Sets = [&](const std::string& name) -> bool {
    if (ptx::IsGraphConditionalFunction(name)) return true;
    if (auto it = sets.find(name); it != sets.end()) return it->second;
    sets[name] = false;
    auto c = calls.find(name);
    bool result = false;
    if (c != calls.end()) {
      result = c->second.indirect;
      for (const std::string& callee : c->second.callees) result = result || Sets(callee);
    }
    sets[name] = result;
    return result;
  };
  for (const std::string& e : entries) {
    if (Sets(e)) out.insert(e);
  }
  return out;
}

bool PtxUsesDeviceHeap(std::string_view ptx) {
  return ForEachExternFunction(ptx, [](std::string_view name) { return ptx::IsDeviceHeapFunction(name); });
}

std::vector<std::string> PtxModuleVariableNames(std::string_view ptx) {
  std::vector<std::string> names;
  int depth = 0;  // brace depth: module scope is depth 0
  ForEachLine(ptx, [&](std::string_view line) {
    const int at_depth = depth;
    for (char c : line) {
      if (c == '{') ++depth;
      if (c == '}' && depth > 0) --depth;
    }
    std::size_t i = line.find_first_not_of(" \t");
    if (at_depth != 0 || i == std::string_view::npos) return false;
    std::string_view t = line.substr(i);
    if (t.rfind(".extern ", 0) == 0) return false;  // defined elsewhere
    for (std::string_view prefix : {".visible ", ".weak ", ".common "}) {
      if (t.rfind(prefix, 0) == 0) t = t.substr(prefix.size());
    }
    if (t.rfind(".global ", 0) != 0 && t.rfind(".const ", 0) != 0) return false;
    // `.global .align 4 .u32 name[2][3] = {...};`: the declarator is the
    // last word before the initializer (or the end), without its dimensions.
    std::string_view decl = t.substr(0, t.find_first_of("=;"));
    if (decl.find(".texref") != std::string_view::npos || decl.find(".samplerref") != std::string_view::npos ||
        decl.find(".surfref") != std::string_view::npos) {
      return false;
    }
    if (std::size_t b = decl.find('['); b != std::string_view::npos) decl = decl.substr(0, b);
    while (!decl.empty() && (decl.back() == ' ' || decl.back() == '\t')) decl.remove_suffix(1);
    const std::size_t space = decl.find_last_of(" \t");
    if (space == std::string_view::npos) return false;
    const std::string_view name = decl.substr(space + 1);
    if (!name.empty() && name[0] != '.') names.emplace_back(name);
    return false;
  });
  return names;
}

bool PtxDeclaresModuleVariables(std::string_view ptx) {
  int depth = 0;  // brace depth: module scope is depth 0
  return ForEachLine(ptx, [&depth](std::string_view line) {
    std::size_t i = line.find_first_not_of(" \t");
    if (i == std::string_view::npos) return false;
    std::string_view t = line.substr(i);
    if (depth == 0) {
      for (std::string_view prefix : {".visible ", ".extern ", ".weak "}) {
        if (t.rfind(prefix, 0) == 0) t = t.substr(prefix.size());
      }
      if (t.rfind(".global ", 0) == 0 || t.rfind(".const ", 0) == 0 || t.rfind(".tex ", 0) == 0 ||
          t.rfind(".global.", 0) == 0 || t.rfind(".const.", 0) == 0) {
        return true;
      }
    }
    for (char c : line) {
      if (c == '{') ++depth;
      if (c == '}' && depth > 0) --depth;
    }
    return false;
  });
}

void ComputeLaunchAccess(KernelAccessPlan& plan, std::span<const uint8_t> params,
                         const std::map<uint64_t, uint64_t>& buffers, const std::map<uint64_t, uint64_t>& globals,
                         CallView* view, std::span<const std::pair<uint64_t, uint64_t>> module_variables) {
  view->kind = plan.kind;
  view->ranges.clear();
  if (plan.kind == AccessKind::kUnknown) return;
  ++plan.launches;
  for (size_t i = 0; i < plan.probes.size(); ++i) {
    const AccessProbe& probe = plan.probes[i];
    if (probe.offset + 8 > params.size()) continue;
    uint64_t v = 0;
    std::memcpy(&v, params.data() + probe.offset, 8);
    if (v == 0) continue;
    uint64_t start = 0, bytes = 0;
    if (!FindHoldingRange(buffers, v, 1, &start, &bytes) && !FindHoldingRange(globals, v, 1, &start, &bytes)) continue;
    if (probe.aggregate_word) ++plan.word_hits[i];
    view->AddOrMerge(start, bytes, probe.write);
  }
  // The variables are distinct ranges: only the few ranges the parameters
  // added can name one already (a whole-set AddOrMerge would be quadratic,
  // and a module of CUDA's libraries has hundreds of variables).
  const size_t from_params = view->ranges.size();
  for (const auto& [start, bytes] : module_variables) {
    AccessRange* same = nullptr;
    for (size_t i = 0; i < from_params && same == nullptr; ++i) {
      if (view->ranges[i].ptr == start) same = &view->ranges[i];
    }
    if (same != nullptr) {
      same->write = true;
    } else {
      view->Add(start, bytes, true);
    }
  }
}

}  // namespace phos::session
