#include "signature/signature_parser.h"
#include "signature/identifier_chars.h"

#include <clang-c/Index.h>

#include <algorithm>
#include <charconv>
#include <mutex>
#include <string_view>
#include <unordered_map>

namespace phos::signature {
namespace {

// libclang is not thread-safe per index (and its global initialisation is
// not documented as thread-safe either): every libclang call in phos goes
// through this one mutex. Parses are rare (once per fatbin, see
// SignatureCache), so the serialisation costs nothing in practice.
std::mutex& LibclangMutex() {
  static std::mutex mu;
  return mu;
}


// Builtin type words libclang understands as printed by the demangler.
bool IsBuiltinWord(std::string_view w) {
  static constexpr std::string_view kWords[] = {
      "const",    "volatile", "unsigned", "signed",  "short",    "long",     "int",
      "char",     "float",    "double",   "bool",    "void",     "wchar_t",  "char8_t",
      "char16_t", "char32_t", "__int128", "__float128", "__restrict"};
  return std::find(std::begin(kWords), std::end(kWords), w) != std::end(kWords);
}

// Demangler spellings that need another spelling for libclang 14.
std::string_view BuiltinAlias(std::string_view w) {
  if (w == "restrict") return "__restrict";
  if (w == "_Float16" || w == "__bf16" || w == "std::bfloat16_t") return "short";  // 2-byte scalars
  if (w == "half") return "short";
  return {};
}

// CUDA vector and half types: declared completely so their sizes are known.
struct CudaType {
  std::string name;
  std::string decl;
};

const std::vector<CudaType>& CudaTypes() {
  static const std::vector<CudaType> types = [] {
    std::vector<CudaType> t;
    struct Base {
      const char* name;
      const char* c_type;
      int size;
    };
    static constexpr Base kBases[] = {
        {"char", "signed char", 1},   {"uchar", "unsigned char", 1},
        {"short", "short", 2},        {"ushort", "unsigned short", 2},
        {"int", "int", 4},            {"uint", "unsigned int", 4},
        {"long", "long", 8},          {"ulong", "unsigned long", 8},
        {"longlong", "long long", 8}, {"ulonglong", "unsigned long long", 8},
        {"float", "float", 4},        {"double", "double", 8},
    };
    static constexpr const char* kFields[] = {"x", "y", "z", "w"};
    for (const auto& b : kBases) {
      for (int n = 1; n <= 4; ++n) {
        // vector_types.h: 1- and 3-vectors have the element's alignment,
        // 2-vectors twice it, 4-vectors four times it capped at 16.
        int align = n == 2 ? 2 * b.size : n == 4 ? std::min(4 * b.size, 16) : b.size;
        std::string name = std::string(b.name) + std::to_string(n);
        std::string decl = "struct alignas(" + std::to_string(align) + ") " + name + " { ";
        for (int f = 0; f < n; ++f) decl += std::string(b.c_type) + " " + kFields[f] + "; ";
        decl += "};";
        t.push_back({name, decl});
        if (n == 4 && b.size == 8) {  // CUDA 13: long4_16a, double4_32a, ...
          for (int a : {16, 32}) {
            std::string an = name + "_" + std::to_string(a) + "a";
            std::string ad = "struct alignas(" + std::to_string(a) + ") " + an + " { " +
                             std::string(b.c_type) + " x, y, z, w; };";
            t.push_back({an, ad});
          }
        }
      }
    }
    t.push_back({"dim3", "struct dim3 { unsigned int x, y, z; };"});
    for (const char* h : {"__half", "__nv_bfloat16", "__half_raw", "__nv_bfloat16_raw"}) {
      t.push_back({h, "struct alignas(2) " + std::string(h) + " { unsigned short x; };"});
    }
    for (const char* h : {"__half2", "__nv_bfloat162", "__half2_raw", "__nv_bfloat162_raw"}) {
      t.push_back({h, "struct alignas(4) " + std::string(h) + " { unsigned short x, y; };"});
    }
    for (const char* f : {"__nv_fp8_e4m3", "__nv_fp8_e5m2"}) {
      t.push_back({f, "struct " + std::string(f) + " { unsigned char x; };"});
    }
    return t;
  }();
  return types;
}

bool IsCudaTypeName(std::string_view name) {
  for (const auto& t : CudaTypes())
    if (t.name == name) return true;
  return false;
}

// End of the balanced group opened at s[i] ('(' or '{'), i.e. the index after
// its closing bracket; npos if unbalanced.
size_t SkipBalanced(std::string_view s, size_t i) {
  char open = s[i];
  char close = open == '(' ? ')' : open == '{' ? '}' : ']';
  int depth = 0;
  for (size_t j = i; j < s.size(); ++j) {
    if (s[j] == open) ++depth;
    else if (s[j] == close && --depth == 0) return j + 1;
  }
  return std::string_view::npos;
}

// End of the template argument list opened at s[i] == '<' (index after the
// matching '>'); npos if unbalanced. See SplitDemangledSignature for the
// bracket rules.
size_t SkipTemplateArgs(std::string_view s, size_t i) {
  std::vector<char> stack{'<'};
  for (size_t j = i + 1; j < s.size(); ++j) {
    char c = s[j];
    char prev = '\0';
    for (size_t k = j; k > 0;) {
      --k;
      if (s[k] != ' ') {
        prev = s[k];
        break;
      }
    }
    if (c == '(' || c == '[' || c == '{') {
      stack.push_back(c);
    } else if (c == ')' || c == ']' || c == '}') {
      char want = c == ')' ? '(' : c == ']' ? '[' : '{';
      while (!stack.empty() && stack.back() != want) stack.pop_back();
      if (stack.empty()) return std::string_view::npos;
      stack.pop_back();
    } else if (c == '<') {
      if (IsIdentChar(prev)) stack.push_back('<');
    } else if (c == '>') {
      if (stack.back() == '<' && prev != '-') {
        stack.pop_back();
        if (stack.empty()) return j + 1;
      }
    }
  }
  return std::string_view::npos;
}

constexpr std::string_view kAnon = "(anonymous namespace)";

bool StartsNameComponent(std::string_view s, size_t i) {
  if (i >= s.size()) return false;
  return IsIdentStart(s[i]) || s[i] == '{' || s.substr(i, kAnon.size()) == kAnon;
}

// End of the qualified name (components, template arguments, local scopes)
// starting at s[i].
size_t SkipQualifiedName(std::string_view s, size_t i) {
  size_t j = i;
  while (true) {
    if (s.substr(j, kAnon.size()) == kAnon) {
      j += kAnon.size();
    } else if (s[j] == '{') {
      j = SkipBalanced(s, j);
      if (j == std::string_view::npos) return s.size();
    } else {
      while (j < s.size() && IsIdentChar(s[j])) ++j;
    }
    if (j < s.size() && s[j] == '<') {
      j = SkipTemplateArgs(s, j);
      if (j == std::string_view::npos) return s.size();
    }
    // Local scope: "f(int)::Local" (a name followed directly by its
    // function's parameter list and "::").
    if (j < s.size() && s[j] == '(') {
      size_t k = SkipBalanced(s, j);
      if (k == std::string_view::npos) return j;
      size_t q = k;
      if (s.substr(q, 6) == " const") q += 6;
      if (s.substr(q, 2) != "::") return j;
      j = q;
    }
    if (s.substr(j, 2) == "::" && StartsNameComponent(s, j + 2)) {
      j += 2;
      continue;
    }
    return j;
  }
}

void AppendToken(std::string* out, std::string_view tok) {
  if (!out->empty() && !tok.empty() && IsIdentChar(out->back()) && IsIdentChar(tok.front())) {
    out->push_back(' ');
  }
  out->append(tok);
}

std::string Placeholder(std::string_view name, std::vector<std::string>* placeholders) {
  size_t idx = 0;
  while (idx < placeholders->size() && (*placeholders)[idx] != name) ++idx;
  if (idx == placeholders->size()) placeholders->emplace_back(name);
  return "__phos_t" + std::to_string(idx);
}

std::string CxString(CXString s) {
  const char* c = clang_getCString(s);
  std::string r = c ? c : "";
  clang_disposeString(s);
  return r;
}

bool IsPointerKind(CXTypeKind k) {
  return k == CXType_Pointer || k == CXType_BlockPointer || k == CXType_ObjCObjectPointer;
}

bool IsArrayKind(CXTypeKind k) {
  return k == CXType_ConstantArray || k == CXType_IncompleteArray || k == CXType_VariableArray ||
         k == CXType_DependentSizedArray;
}

AccessRole ClassifyByValue(CXType t, bool* pointee_is_pointer) {
  t = clang_getCanonicalType(t);
  CXTypeKind k = t.kind;
  if (IsPointerKind(k)) {
    CXType pointee = clang_getCanonicalType(clang_getPointeeType(t));
    bool is_const = clang_isConstQualifiedType(pointee) != 0;
    CXType elem = pointee;
    while (IsArrayKind(elem.kind)) {  // const float (*)[4]: const elements
      elem = clang_getCanonicalType(clang_getArrayElementType(elem));
      is_const = is_const || clang_isConstQualifiedType(elem) != 0;
    }
    *pointee_is_pointer = IsPointerKind(elem.kind);
    return is_const ? AccessRole::kRead : AccessRole::kReadWrite;
  }
  if (k == CXType_LValueReference || k == CXType_RValueReference) {
    // A __global__ cannot take references to device memory; a reference
    // parameter counts as a by-value aggregate of the referenced type.
    AccessRole r = ClassifyByValue(clang_getPointeeType(t), pointee_is_pointer);
    *pointee_is_pointer = false;
    return r == AccessRole::kNone ? AccessRole::kNone : AccessRole::kScanWords;
  }
  if (IsArrayKind(k)) {
    bool ignored = false;
    AccessRole r = ClassifyByValue(clang_getArrayElementType(t), &ignored);
    return r == AccessRole::kNone ? AccessRole::kNone : AccessRole::kScanWords;
  }
  if (k == CXType_Void) return AccessRole::kNone;
  if (k >= CXType_FirstBuiltin && k <= CXType_LastBuiltin) return AccessRole::kNone;
  switch (k) {
    case CXType_Enum:
    case CXType_MemberPointer:  // an offset, not an address
    case CXType_Complex:
    case CXType_Vector:
    case CXType_ExtVector:
      return AccessRole::kNone;
    case CXType_Atomic:
      return ClassifyByValue(clang_Type_getValueType(t), pointee_is_pointer);
    default:
      // Records (structs, classes, unions, placeholders) and anything
      // unexpected: scan.
      return AccessRole::kScanWords;
  }
}

struct VisitState {
  std::vector<CXCursor> decls;  // index = parameter number
};

CXChildVisitResult Visit(CXCursor c, CXCursor /*parent*/, CXClientData data) {
  auto* st = static_cast<VisitState*>(data);
  if (clang_getCursorKind(c) == CXCursor_FunctionDecl) {
    std::string name = CxString(clang_getCursorSpelling(c));
    constexpr std::string_view kPrefix = "__phos_p";
    if (name.compare(0, kPrefix.size(), kPrefix) == 0) {
      size_t idx = 0;
      const char* b = name.data() + kPrefix.size();
      const char* e = name.data() + name.size();
      auto [p, ec] = std::from_chars(b, e, idx);
      if (ec == std::errc() && p == e && idx < st->decls.size()) st->decls[idx] = c;
    }
  }
  return CXChildVisit_Continue;
}

}  // namespace

std::string SanitizeTypeForClang(const std::string& demangled_type,
                                 std::vector<std::string>* placeholders) {
  std::string_view s = demangled_type;
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (c == ' ') {
      if (!out.empty() && out.back() != ' ') out.push_back(' ');
      ++i;
      continue;
    }
    if (IsIdentStart(c)) {
      size_t j = i;
      while (j < s.size() && IsIdentChar(s[j])) ++j;
      std::string_view word = s.substr(i, j - i);
      bool qualified = s.substr(j, 2) == "::" || (j < s.size() && s[j] == '<');
      if (!qualified && IsBuiltinWord(word)) {
        AppendToken(&out, word);
        i = j;
        continue;
      }
      if (!qualified && !BuiltinAlias(word).empty()) {
        AppendToken(&out, BuiltinAlias(word));
        i = j;
        continue;
      }
      if (word == "decltype" && j < s.size() && s[j] == '(') {
        size_t k = SkipBalanced(s, j);
        if (k == std::string_view::npos) k = s.size();
        std::string_view whole = s.substr(i, k - i);
        if (whole == "decltype(nullptr)") AppendToken(&out, whole);
        else AppendToken(&out, Placeholder(whole, placeholders));
        i = k;
        continue;
      }
    }
    if (StartsNameComponent(s, i)) {
      size_t j = SkipQualifiedName(s, i);
      if (j <= i) j = i + 1;
      std::string_view name = s.substr(i, j - i);
      if (name == "std::nullptr_t") AppendToken(&out, "decltype(nullptr)");
      else if (!BuiltinAlias(name).empty()) AppendToken(&out, BuiltinAlias(name));
      else if (IsCudaTypeName(name)) AppendToken(&out, name);
      else AppendToken(&out, Placeholder(name, placeholders));
      i = j;
      continue;
    }
    out.push_back(c);
    ++i;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

Status ParseParameterTypes(const std::vector<std::string>& types, std::vector<ParsedParam>* out) {
  out->assign(types.size(), ParsedParam{});
  if (types.empty()) return Status::Ok();

  std::vector<std::string> placeholders;
  std::vector<std::string> sanitized;
  sanitized.reserve(types.size());
  for (const auto& t : types) sanitized.push_back(SanitizeTypeForClang(t, &placeholders));

  std::string src;
  unsigned line = 1;
  for (const auto& t : CudaTypes()) {
    src += t.decl;
    src += '\n';
    ++line;
  }
  for (size_t i = 0; i < placeholders.size(); ++i) {
    src += "struct __phos_t" + std::to_string(i) + ";\n";
    ++line;
  }
  const unsigned first_param_line = line;
  for (size_t i = 0; i < sanitized.size(); ++i) {
    // A newline inside a type would shift the line mapping; the demangler
    // never prints one, but a hostile name could.
    std::string t = sanitized[i];
    std::replace(t.begin(), t.end(), '\n', ' ');
    src += "void __phos_p" + std::to_string(i) + "(" + t + ");\n";
  }

  static constexpr const char* kFile = "phos_kernel_signature.cc";
  const char* args[] = {"-x",         "c++",          "-std=c++17",      "-fsyntax-only",
                        "-nostdinc",  "-nostdinc++",  "-ferror-limit=0", "-w"};
  CXUnsavedFile unsaved{kFile, src.data(), static_cast<unsigned long>(src.size())};

  std::lock_guard<std::mutex> lock(LibclangMutex());
  CXIndex index = clang_createIndex(/*excludeDeclarationsFromPCH=*/0, /*displayDiagnostics=*/0);
  if (index == nullptr) return Status::Internal("clang_createIndex failed");
  CXTranslationUnit tu = nullptr;
  CXErrorCode err = clang_parseTranslationUnit2(
      index, kFile, args, static_cast<int>(std::size(args)), &unsaved, 1,
      CXTranslationUnit_SkipFunctionBodies | CXTranslationUnit_KeepGoing, &tu);
  if (err != CXError_Success || tu == nullptr) {
    clang_disposeIndex(index);
    return Status::Internal("libclang could not parse the kernel signature declarations (error " +
                            std::to_string(static_cast<int>(err)) + ")");
  }

  // Errors, by parameter line.
  std::vector<std::string> errors(types.size());
  bool preamble_error = false;
  std::string preamble_msg;
  unsigned ndiag = clang_getNumDiagnostics(tu);
  for (unsigned d = 0; d < ndiag; ++d) {
    CXDiagnostic diag = clang_getDiagnostic(tu, d);
    if (clang_getDiagnosticSeverity(diag) >= CXDiagnostic_Error) {
      unsigned dline = 0, col = 0, off = 0;
      CXFile file = nullptr;
      clang_getSpellingLocation(clang_getDiagnosticLocation(diag), &file, &dline, &col, &off);
      std::string msg = CxString(clang_getDiagnosticSpelling(diag));
      if (dline >= first_param_line && dline - first_param_line < types.size()) {
        auto& e = errors[dline - first_param_line];
        if (e.empty()) e = msg;
      } else {
        preamble_error = true;
        if (preamble_msg.empty()) preamble_msg = msg;
      }
    }
    clang_disposeDiagnostic(diag);
  }

  VisitState st;
  st.decls.assign(types.size(), clang_getNullCursor());
  clang_visitChildren(clang_getTranslationUnitCursor(tu), Visit, &st);

  for (size_t i = 0; i < types.size(); ++i) {
    ParsedParam& p = (*out)[i];
    if (preamble_error) {
      p.error = "error outside the parameter declarations: " + preamble_msg;
      continue;
    }
    if (!errors[i].empty()) {
      p.error = errors[i] + " (in '" + sanitized[i] + "')";
      continue;
    }
    CXCursor decl = st.decls[i];
    if (clang_Cursor_isNull(decl) || clang_isInvalidDeclaration(decl) ||
        clang_Cursor_getNumArguments(decl) != 1) {
      p.error = "libclang found no single-parameter declaration for '" + sanitized[i] + "'";
      continue;
    }
    CXType type = clang_getCursorType(clang_Cursor_getArgument(decl, 0));
    p.parsed = true;
    p.role = ClassifyByValue(type, &p.pointee_is_pointer);
    CXType canon = clang_getCanonicalType(type);
    long long size = clang_Type_getSizeOf(canon);
    long long align = clang_Type_getAlignOf(canon);
    if (size > 0 && align > 0) {
      p.size_known = true;
      p.size = static_cast<uint32_t>(size);
      p.align = static_cast<uint32_t>(align);
    }
  }

  clang_disposeTranslationUnit(tu);
  clang_disposeIndex(index);
  return Status::Ok();
}

}  // namespace phos::signature
