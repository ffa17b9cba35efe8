// PTX emitter: canonical text for the IR.
#include "ptx/ptx_emitter.h"

#include <cinttypes>
#include <cstdio>
#include <type_traits>

namespace phos::ptx {
namespace {

void AppendU64(std::string& s, uint64_t v, int radix) {
  if (radix == 10) {
    s += std::to_string(v);
    return;
  }
  std::string digits;
  do {
    digits += "0123456789abcdef"[v % static_cast<uint64_t>(radix)];
    v /= static_cast<uint64_t>(radix);
  } while (v);
  s.append(digits.rbegin(), digits.rend());
}

void AppendOperand(std::string& s, const Operand& o) {
  using K = Operand::Kind;
  switch (o.kind) {
    case K::kRegister:
      if (o.neg) s += '!';
      s += o.name;
      return;
    case K::kImmInt:
      if (o.minus) s += '-';
      if (o.radix == 16) s += "0x";
      else if (o.radix == 2) s += "0b";
      else if (o.radix == 8) s += '0';
      AppendU64(s, o.bits, o.radix == 16 || o.radix == 2 || o.radix == 8 ? o.radix : 10);
      if (o.unsigned_suffix) s += 'U';
      return;
    case K::kImmF32: {
      char buf[16];
      std::snprintf(buf, sizeof buf, "0f%08X", static_cast<unsigned>(o.bits & 0xffffffffu));
      s += buf;
      return;
    }
    case K::kImmF64: {
      char buf[24];
      std::snprintf(buf, sizeof buf, "0d%016" PRIX64, o.bits);
      s += buf;
      return;
    }
    case K::kSymbol:
    case K::kLabel:
      if (o.generic_wrap) {
        s += "generic(";
        s += o.name;
        s += ')';
      } else {
        s += o.name;
      }
      if (o.has_offset) {
        if (o.offset < 0) {
          s += '-';
          s += std::to_string(0 - static_cast<uint64_t>(o.offset));
        } else {
          s += '+';
          s += std::to_string(o.offset);
        }
      }
      return;
    case K::kAddress:
      s += '[';
      s += o.name;
      if (o.has_offset) {
        if (!o.name.empty()) s += '+';
        s += std::to_string(o.offset);
      }
      for (const auto& e : o.elems) {
        s += ", ";
        AppendOperand(s, e);
      }
      s += ']';
      return;
    case K::kVector:
    case K::kList:
      s += o.kind == K::kVector ? '{' : '(';
      for (size_t i = 0; i < o.elems.size(); ++i) {
        if (i) s += ", ";
        AppendOperand(s, o.elems[i]);
      }
      s += o.kind == K::kVector ? '}' : ')';
      return;
    case K::kPair:
      for (size_t i = 0; i < o.elems.size(); ++i) {
        if (i) s += '|';
        AppendOperand(s, o.elems[i]);
      }
      return;
  }
}

void AppendDecl(std::string& s, const VarDecl& v) {
  auto word = [&s](std::string_view w) {
    if (!s.empty() && s.back() != '\t' && s.back() != '\n' && s.back() != '(' && s.back() != ' ') s += ' ';
    s += w;
  };
  if (v.linkage != Linkage::kNone) word(std::string(".") + std::string(LinkageName(v.linkage)));
  word(std::string(".") + std::string(SpaceName(v.space)));
  if (v.align) word(".align " + std::to_string(*v.align));
  if (v.vec > 1) word(".v" + std::to_string(v.vec));
  if (v.type == Type::kOther) word("." + v.type_name);
  else if (v.type != Type::kNone) word(std::string(".") + std::string(TypeName(v.type)));
  if (v.ptr) {
    std::string p = ".ptr";
    if (v.ptr_space != Space::kNone) p += "." + std::string(SpaceName(v.ptr_space));
    if (v.ptr_align) p += ".align " + std::to_string(*v.ptr_align);
    word(p);
  }
  word(v.name);
  if (v.range) s += "<" + std::to_string(*v.range) + ">";
  for (int64_t d : v.dims) s += d < 0 ? std::string("[]") : "[" + std::to_string(d) + "]";
  if (v.init) {
    s += " = ";
    AppendOperand(s, *v.init);
  }
}

void AppendInstruction(std::string& s, const Instruction& in) {
  if (!in.guard.empty()) {
    s += in.guard_neg ? "@!" : "@";
    s += in.guard;
    s += ' ';
  }
  s += in.opcode;
  for (const auto& m : in.mods) {
    s += '.';
    s += m;
  }
  for (size_t i = 0; i < in.operands.size(); ++i) {
    s += i ? ", " : "\t";
    AppendOperand(s, in.operands[i]);
  }
  s += ';';
}

void AppendPragma(std::string& s, const Pragma& p) {
  s += ".pragma ";
  for (size_t i = 0; i < p.strings.size(); ++i) {
    if (i) s += ", ";
    s += '"' + p.strings[i] + '"';
  }
  s += ';';
}

void AppendParams(std::string& s, const std::vector<VarDecl>& ps) {
  s += '(';
  for (size_t i = 0; i < ps.size(); ++i) {
    s += "\n\t";
    AppendDecl(s, ps[i]);
    if (i + 1 < ps.size()) s += ',';
  }
  if (!ps.empty()) s += '\n';
  s += ')';
}

void AppendFunction(std::string& s, const Function& f) {
  if (f.linkage != Linkage::kNone) {
    s += '.';
    s += LinkageName(f.linkage);
    s += ' ';
  }
  s += f.is_entry ? ".entry " : ".func ";
  if (!f.returns.empty()) {
    s += '(';
    for (size_t i = 0; i < f.returns.size(); ++i) {
      if (i) s += ", ";
      AppendDecl(s, f.returns[i]);
    }
    s += ") ";
  }
  s += f.name;
  if (f.has_param_list || !f.params.empty()) AppendParams(s, f.params);
  s += '\n';
  for (const auto& d : f.directives) {
    s += '.' + d.name;
    for (size_t i = 0; i < d.args.size(); ++i) {
      s += i ? ", " : " ";
      s += std::to_string(d.args[i]);
    }
    s += '\n';
  }
  if (!f.has_body) {
    s += ";\n";
    return;
  }
  s += "{\n";
  for (const auto& st : f.body) {
    std::visit(
        [&s](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, Label>) {
            s += x.name + ":\n";
            return;
          } else {
            s += '\t';
            if constexpr (std::is_same_v<T, Instruction>) {
              AppendInstruction(s, x);
            } else if constexpr (std::is_same_v<T, VarDecl>) {
              AppendDecl(s, x);
              s += ';';
            } else if constexpr (std::is_same_v<T, BlockBegin>) {
              s += '{';
            } else if constexpr (std::is_same_v<T, BlockEnd>) {
              s += '}';
            } else if constexpr (std::is_same_v<T, Pragma>) {
              AppendPragma(s, x);
            } else if constexpr (std::is_same_v<T, Loc>) {
              s += ".loc\t" + std::to_string(x.file) + ' ' + std::to_string(x.line) + ' ' +
                   std::to_string(x.column);
              if (!x.extra.empty()) s += x.extra[0] == ',' ? x.extra : " " + x.extra;
            } else if constexpr (std::is_same_v<T, RawStatement>) {
              s += x.text;
            }
            s += '\n';
          }
        },
        st);
  }
  s += "}\n";
}

}  // namespace

std::string EmitOperand(const Operand& o) {
  std::string s;
  AppendOperand(s, o);
  return s;
}

std::string EmitVarDecl(const VarDecl& v) {
  std::string s;
  AppendDecl(s, v);
  return s;
}

std::string EmitInstruction(const Instruction& in) {
  std::string s;
  AppendInstruction(s, in);
  return s;
}

std::string EmitFunction(const Function& f) {
  std::string s;
  AppendFunction(s, f);
  return s;
}

std::string EmitModule(const Module& m) {
  std::string s;
  s += ".version " + m.version + "\n";
  s += ".target ";
  for (size_t i = 0; i < m.target.size(); ++i) {
    if (i) s += ", ";
    s += m.target[i];
  }
  s += '\n';
  if (m.has_address_size) s += ".address_size " + std::to_string(m.address_size) + "\n";
  for (const auto& item : m.items) {
    std::visit(
        [&s](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, VarDecl>) {
            AppendDecl(s, x);
            s += ";\n";
          } else if constexpr (std::is_same_v<T, Function>) {
            s += '\n';
            AppendFunction(s, x);
          } else if constexpr (std::is_same_v<T, FileDirective>) {
            s += ".file\t" + std::to_string(x.index) + " \"" + x.path + '"';
            for (int64_t e : x.extra) s += ", " + std::to_string(e);
            s += '\n';
          } else if constexpr (std::is_same_v<T, RawDirective>) {
            s += x.text + "\n";
          } else if constexpr (std::is_same_v<T, Pragma>) {
            AppendPragma(s, x);
            s += '\n';
          }
        },
        item);
  }
  return s;
}

}  // namespace phos::ptx
