#include "ptx/ptx_link.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <utility>

#include "ptx/ptx_emitter.h"
#include "ptx/ptx_parser.h"

namespace phos::ptx {
namespace {

// The module-scope name an item declares or defines ("" for directives).
const std::string* NameOf(const TopItem& item) {
  if (const auto* f = std::get_if<Function>(&item)) return &f->name;
  if (const auto* v = std::get_if<VarDecl>(&item)) return &v->name;
  return nullptr;
}

Linkage LinkageOf(const TopItem& item) {
  if (const auto* f = std::get_if<Function>(&item)) return f->linkage;
  return std::get<VarDecl>(item).linkage;
}

bool IsDefinition(const TopItem& item) {
  if (const auto* f = std::get_if<Function>(&item)) return f->has_body;
  return std::get<VarDecl>(item).linkage != Linkage::kExtern;
}

// "9.0" -> {9, 0}; unparsable parts count as 0.
std::pair<int, int> VersionOf(const std::string& v) {
  const size_t dot = v.find('.');
  auto num = [](const std::string& s) { return s.empty() ? 0 : std::atoi(s.c_str()); };
  return {num(v.substr(0, dot)), dot == std::string::npos ? 0 : num(v.substr(dot + 1))};
}

// "sm_90a" -> 90; 0 for anything else.
int SmNumber(const std::string& target) {
  return target.rfind("sm_", 0) == 0 ? std::atoi(target.c_str() + 3) : 0;
}

void RenameOperand(Operand& o, const std::map<std::string, std::string>& names) {
  if (o.kind == Operand::Kind::kSymbol || (o.kind == Operand::Kind::kAddress && !o.base_is_reg)) {
    if (auto it = names.find(o.name); it != names.end()) o.name = it->second;
  }
  for (Operand& e : o.elems) RenameOperand(e, names);
}

void RenameVar(VarDecl& v, const std::map<std::string, std::string>& names) {
  if (v.init) RenameOperand(*v.init, names);
}

// Renames the module-scope names in `names` everywhere in `m`.
void RenameInModule(Module& m, const std::map<std::string, std::string>& names) {
  for (TopItem& item : m.items) {
    if (auto* f = std::get_if<Function>(&item)) {
      if (auto it = names.find(f->name); it != names.end()) f->name = it->second;
      for (Statement& st : f->body) {
        if (auto* in = std::get_if<Instruction>(&st)) {
          for (Operand& o : in->operands) RenameOperand(o, names);
        } else if (auto* v = std::get_if<VarDecl>(&st)) {
          RenameVar(*v, names);
        }
      }
    } else if (auto* v = std::get_if<VarDecl>(&item)) {
      if (auto it = names.find(v->name); it != names.end()) v->name = it->second;
      RenameVar(*v, names);
    }
  }
}

// Where the one definition of a linked name is: module and item index.
struct Chosen {
  size_t module = 0;
  size_t item = 0;
  Linkage linkage = Linkage::kNone;
};
using Definitions = std::map<std::string, Chosen>;

// A definition nothing else may replace (not .weak or .common).
bool IsStrong(Linkage l) { return l == Linkage::kVisible || l == Linkage::kNone; }

// Whether item `i` of input `k` is the definition chosen for `name`.
bool IsChosen(const Definitions& defined, const std::string& name, size_t k, size_t i) {
  auto it = defined.find(name);
  return it != defined.end() && it->second.module == k && it->second.item == i;
}

}  // namespace

Status LinkModules(std::vector<Module> inputs, Module* out) {
  *out = Module();
  if (inputs.empty()) return Status::InvalidArgument("PTX link: no inputs");
  for (size_t k = 1; k < inputs.size(); ++k) {
    if (inputs[k].address_size != inputs[0].address_size) {
      return Status::InvalidArgument("PTX link: input " + std::to_string(k) + " has another .address_size than input 0");
    }
  }
  // Private names another module also uses get a name of their own.
  std::vector<std::set<std::string>> names_of(inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    for (const TopItem& item : inputs[k].items) {
      if (const std::string* n = NameOf(item)) names_of[k].insert(*n);
    }
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    std::map<std::string, std::string> renames;
    for (const TopItem& item : inputs[k].items) {
      const std::string* n = NameOf(item);
      if (n == nullptr || LinkageOf(item) != Linkage::kNone || renames.count(*n) != 0) continue;
      const bool clash = std::any_of(names_of.begin(), names_of.end(), [&](const std::set<std::string>& other) {
        return &other != &names_of[k] && other.count(*n) != 0;
      });
      if (clash) renames[*n] = *n + "$phos" + std::to_string(k);
    }
    if (!renames.empty()) RenameInModule(inputs[k], renames);
  }
  // One definition per linked name: strong over weak/common, else the first.
  Definitions defined;
  for (size_t k = 0; k < inputs.size(); ++k) {
    for (size_t i = 0; i < inputs[k].items.size(); ++i) {
      const TopItem& item = inputs[k].items[i];
      const std::string* n = NameOf(item);
      if (n == nullptr || !IsDefinition(item)) continue;
      const Linkage l = LinkageOf(item);
      auto [it, fresh] = defined.try_emplace(*n, Chosen{k, i, l});
      if (fresh) continue;
      if (!IsStrong(l)) continue;
      if (IsStrong(it->second.linkage)) {
        return Status::InvalidArgument("PTX link: '" + *n + "' is defined in input " +
                                       std::to_string(it->second.module) + " and in input " + std::to_string(k));
      }
      it->second = Chosen{k, i, l};
    }
  }

  // The newest architecture any input targets (PTX for an older one runs
  // on a newer GPU; the device linker compiles each for the device).
  out->target = inputs[0].target;
  for (const Module& m : inputs) {
    if (!m.target.empty() && (out->target.empty() || SmNumber(m.target[0]) > SmNumber(out->target[0]))) {
      out->target = m.target;
    }
  }
  out->address_size = inputs[0].address_size;
  out->has_address_size = inputs[0].has_address_size;
  out->version = inputs[0].version;
  for (const Module& m : inputs) {
    if (VersionOf(m.version) > VersionOf(out->version)) out->version = m.version;
  }
  // .file directives first, renumbered per module; .loc lines follow.
  int64_t file_base = 0;
  for (Module& m : inputs) {
    int64_t highest = 0;
    for (TopItem& item : m.items) {
      if (auto* file = std::get_if<FileDirective>(&item)) {
        highest = std::max(highest, file->index);
        FileDirective moved = *file;
        moved.index += file_base;
        out->items.emplace_back(std::move(moved));
      } else if (auto* f = std::get_if<Function>(&item)) {
        for (Statement& st : f->body) {
          if (auto* loc = std::get_if<Loc>(&st); loc != nullptr && file_base != 0) loc->file += file_base;
        }
      }
    }
    file_base += highest;
  }
  // Then one declaration per function (a definition's linkage, else the
  // prototype as given), the variables, and the function bodies: every use
  // comes after a declaration, as ptxas wants.
  std::set<std::string> declared;
  for (size_t k = 0; k < inputs.size(); ++k) {
    for (const TopItem& item : inputs[k].items) {
      const auto* f = std::get_if<Function>(&item);
      if (f == nullptr || f->is_entry || !declared.insert(f->name).second) continue;
      auto def = defined.find(f->name);
      Function decl = def != defined.end() ? std::get<Function>(inputs[def->second.module].items[def->second.item]) : *f;
      decl.has_body = false;
      decl.body.clear();
      out->items.emplace_back(std::move(decl));
    }
  }
  std::set<std::string> variables;
  for (size_t k = 0; k < inputs.size(); ++k) {
    for (size_t i = 0; i < inputs[k].items.size(); ++i) {
      const auto* v = std::get_if<VarDecl>(&inputs[k].items[i]);
      if (v == nullptr) continue;
      const bool unresolved = defined.count(v->name) == 0 && variables.count(v->name) == 0;
      if (IsChosen(defined, v->name, k, i) || unresolved) {
        variables.insert(v->name);
        out->items.emplace_back(*v);
      }
    }
  }
  for (size_t k = 0; k < inputs.size(); ++k) {
    for (size_t i = 0; i < inputs[k].items.size(); ++i) {
      TopItem& item = inputs[k].items[i];
      if (auto* f = std::get_if<Function>(&item); f != nullptr && f->has_body) {
        if (IsChosen(defined, f->name, k, i)) out->items.emplace_back(std::move(*f));
      } else if (auto* p = std::get_if<Pragma>(&item)) {
        out->items.emplace_back(std::move(*p));
      }
    }
  }
  return Status::Ok();
}

Status LinkPtxTexts(const std::vector<std::string>& texts, std::string* out) {
  std::vector<Module> modules(texts.size());
  for (size_t k = 0; k < texts.size(); ++k) {
    // A text may end in the NUL of a C string (nvJitLink's linked PTX does).
    const std::string_view text = std::string_view(texts[k]).substr(0, texts[k].find('\0'));
    PHOS_RETURN_IF_ERROR(ParseModule(text, &modules[k]).WithContext("PTX link: input " + std::to_string(k)));
  }
  Module linked;
  PHOS_RETURN_IF_ERROR(LinkModules(std::move(modules), &linked));
  *out = EmitModule(linked);
  return Status::Ok();
}

}  // namespace phos::ptx
