#include "signature/kernel_signature.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "signature/demangle.h"
#include "signature/signature_parser.h"

namespace phos::signature {
namespace {

// The rule for parameters without types: an 8-byte value may be a pointer.
AccessRole RoleFromSize(uint32_t size) {
  if (size == 8) return AccessRole::kReadWrite;
  if (size > 8) return AccessRole::kScanWords;
  return AccessRole::kNone;
}

Status SortKparams(const std::string& name, const std::vector<ParamInfo>& kparams,
                   std::vector<ParamInfo>* sorted) {
  sorted->assign(kparams.size(), ParamInfo{});
  std::vector<bool> seen(kparams.size(), false);
  for (const auto& p : kparams) {
    if (p.ordinal >= kparams.size() || seen[p.ordinal]) {
      return Status::InvalidArgument("kernel " + name + ": .nv.info parameter ordinals are not 0.." +
                                     std::to_string(kparams.size() - 1) + " (ordinal " +
                                     std::to_string(p.ordinal) + ")");
    }
    seen[p.ordinal] = true;
    (*sorted)[p.ordinal] = p;
  }
  return Status::Ok();
}

void FillUntyped(const std::vector<ParamInfo>& sorted, KernelSignature* sig) {
  sig->params.clear();
  sig->fully_typed = false;
  sig->from_nv_info = true;
  for (const auto& k : sorted) {
    ParamAccess a;
    a.ordinal = k.ordinal;
    a.offset = k.offset;
    a.size = k.size;
    a.layout_known = true;
    a.role = RoleFromSize(k.size);
    sig->params.push_back(std::move(a));
  }
}

struct Pending {
  bool typed = false;                 // has demangled parameter texts
  bool has_nv_info = false;
  std::vector<ParamInfo> sorted;      // kparams by ordinal
  std::vector<std::string> types;     // demangled parameter types
  std::vector<size_t> parsed_index;   // into the shared parse
};

void Merge(const Pending& pend, const std::vector<ParsedParam>& parsed, KernelSignature* sig) {
  const size_t n = pend.types.size();
  sig->params.clear();
  sig->fully_typed = true;
  sig->from_nv_info = pend.has_nv_info;
  uint32_t cursor = 0;
  bool layout_ok = true;
  for (size_t i = 0; i < n; ++i) {
    const ParsedParam& pp = parsed[pend.parsed_index[i]];
    ParamAccess a;
    a.ordinal = static_cast<uint32_t>(i);
    a.type = pend.types[i];
    a.typed = pp.parsed;
    a.role = pp.parsed ? pp.role : AccessRole::kScanWords;
    a.pointee_is_pointer = pp.parsed && pp.pointee_is_pointer;
    if (!pp.parsed) {
      sig->fully_typed = false;
      spdlog::warn("kernel {}: parameter {} '{}' not understood ({}); using the size-only rule",
                   sig->mangled_name, i, a.type, pp.error);
    }
    if (pend.has_nv_info) {
      const ParamInfo& k = pend.sorted[i];
      a.offset = k.offset;
      a.size = k.size;
      a.layout_known = true;
      if (!pp.parsed) {
        a.role = RoleFromSize(k.size);
      } else if ((a.role == AccessRole::kRead || a.role == AccessRole::kReadWrite) && k.size != 8) {
        spdlog::warn("kernel {}: pointer parameter {} '{}' is {} bytes in .nv.info; using the "
                     "size-only rule", sig->mangled_name, i, a.type, k.size);
        a.role = RoleFromSize(k.size);
        a.typed = false;
        a.pointee_is_pointer = false;
        sig->fully_typed = false;
      } else if (pp.size_known && pp.size != k.size) {
        spdlog::debug("kernel {}: parameter {} '{}': libclang size {} vs .nv.info {}",
                      sig->mangled_name, i, a.type, pp.size, k.size);
      }
    } else if (layout_ok && pp.parsed && pp.size_known) {
      cursor = (cursor + pp.align - 1) / pp.align * pp.align;
      a.offset = cursor;
      a.size = pp.size;
      a.layout_known = true;
      cursor += pp.size;
    } else {
      layout_ok = false;  // offsets after an unknown size are unknown too
    }
    // An aggregate smaller than a word cannot hold an address (enums land
    // here: the name alone does not tell an enum from a struct).
    if (a.role == AccessRole::kScanWords && a.layout_known && a.size < 8) a.role = AccessRole::kNone;
    sig->params.push_back(std::move(a));
  }
}

}  // namespace

uint32_t KernelSignature::ParamBufferSize() const {
  uint32_t end = 0;
  for (const auto& p : params) {
    if (!p.layout_known) return 0;
    end = std::max(end, p.offset + p.size);
  }
  return end;
}

std::string KernelSignature::ToString() const {
  std::string s = demangled.empty() ? mangled_name : demangled;
  s += " [";
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    if (i) s += ", ";
    s += std::to_string(p.ordinal) + ":";
    if (!p.type.empty()) s += p.type + " ";
    s += AccessRoleName(p.role);
    if (p.pointee_is_pointer) s += "(table)";
    if (p.layout_known) s += "@" + std::to_string(p.offset) + "+" + std::to_string(p.size);
  }
  s += "]";
  return s;
}

void ResolveKernelSignatures(const std::vector<KernelRequest>& requests,
                             std::vector<KernelSignature>* out, std::vector<Status>* statuses) {
  out->assign(requests.size(), KernelSignature{});
  statuses->assign(requests.size(), Status::Ok());
  std::vector<Pending> pending(requests.size());

  // Demangle and split; collect the distinct parameter type texts.
  std::vector<std::string> all_types;
  std::map<std::string, size_t> type_index;
  for (size_t r = 0; r < requests.size(); ++r) {
    const auto& req = requests[r];
    KernelSignature& sig = (*out)[r];
    Pending& pend = pending[r];
    sig.mangled_name = req.mangled_name;
    pend.has_nv_info = req.has_nv_info || !req.kparams.empty();
    Status st = SortKparams(req.mangled_name, req.kparams, &pend.sorted);
    if (!st.ok()) {
      (*statuses)[r] = st;
      continue;
    }
    if (IsMangledName(req.mangled_name)) {
      std::string demangled, function;
      st = Demangle(req.mangled_name, &demangled);
      if (st.ok()) {
        sig.demangled = demangled;
        st = SplitDemangledSignature(demangled, &function, &pend.types);
      }
      if (!st.ok()) {
        spdlog::warn("kernel {}: {}; treating its parameters as untyped", req.mangled_name,
                     st.message());
        pend.types.clear();
      } else {
        pend.typed = true;
      }
    } else {
      sig.extern_c = true;
    }
    if (pend.typed && pend.has_nv_info && pend.sorted.size() != pend.types.size()) {
      spdlog::warn("kernel {}: the name has {} parameters, .nv.info {}; using the size-only rule",
                   req.mangled_name, pend.types.size(), pend.sorted.size());
      pend.typed = false;
    }
    if (!pend.typed) continue;
    for (const auto& t : pend.types) {
      auto [it, inserted] = type_index.emplace(t, all_types.size());
      if (inserted) all_types.push_back(t);
      pend.parsed_index.push_back(it->second);
    }
  }

  std::vector<ParsedParam> parsed;
  Status parse_status = ParseParameterTypes(all_types, &parsed);
  if (!parse_status.ok()) {
    spdlog::warn("kernel signatures: {}; using the size-only rule", parse_status.message());
  }

  for (size_t r = 0; r < requests.size(); ++r) {
    if (!(*statuses)[r].ok()) continue;
    KernelSignature& sig = (*out)[r];
    const Pending& pend = pending[r];
    if (pend.typed && (parse_status.ok() || pend.types.empty())) {
      Merge(pend, parsed, &sig);
    } else if (pend.has_nv_info) {
      FillUntyped(pend.sorted, &sig);
    } else if (pend.typed) {
      (*statuses)[r] = parse_status.WithContext("kernel " + sig.mangled_name);
    } else {
      (*statuses)[r] = Status::NotFound(
          "kernel " + sig.mangled_name +
          ": no parameter types in the name (extern \"C\") and no .nv.info parameter table");
    }
  }
}

Status ResolveKernelSignature(const std::string& mangled_name, const std::vector<ParamInfo>& kparams,
                              KernelSignature* out) {
  std::vector<KernelSignature> sigs;
  std::vector<Status> statuses;
  ResolveKernelSignatures({KernelRequest{mangled_name, kparams}}, &sigs, &statuses);
  if (!statuses[0].ok()) return statuses[0];
  *out = std::move(sigs[0]);
  return Status::Ok();
}

}  // namespace phos::signature
