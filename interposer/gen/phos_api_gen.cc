// phos_api_gen: build-time generator of libphos.so's CUDA export layer.
//
// Parses the toolkit's cuda.h and cuda_runtime_api.h (plus their profiler
// companions cudaProfiler.h and cuda_profiler_api.h), cublas_api.h and
// cublasLt.h with libclang and emits,
// for every C-ABI function those headers declare, an exported weak stub with
// the exact signature, a stable id and a name -> function-pointer table
// (docs/interposer.md, "Generated exports").
//
// Three parses, unioned by symbol name (the first parse that declares a
// symbol owns it, and its stub is compiled in that parse's configuration so
// the header declaration checks the stub's signature):
//   0 "default":  plain headers. cuda.h #defines many names to their _v2/_v3
//                 variants, so the declared names are what apps link against.
//   1 "ptds":     -DCUDA_API_PER_THREAD_DEFAULT_STREAM: the _ptds/_ptsz
//                 per-thread-default-stream variants (nvcc --default-stream
//                 per-thread maps the plain names to these by macro).
//   2 "internal": -D__CUDA_API_VERSION_INTERNAL: the headers' own
//                 implementation view, which #undefs the versioning macros and
//                 declares the legacy unversioned prototypes (cuMemAlloc with
//                 its 32-bit size, cuCtxCreate, cuGetProcAddress, ...) that
//                 old binaries still link against.
//   3 "blas":     cublas_api.h and cublasLt.h (their own ids, after CUDA's).
//   4 "nccl":     nccl.h (its own ids, after cuBLASLt's).
//
// Usage: phos_api_gen --cuda-include DIR --out-dir DIR

#include <clang-c/Index.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Param {
  std::string type;  // clang_getTypeSpelling of the parameter's declared type
  std::string name;  // as spelled; empty when the header gives none
};

// The libraries whose C API libphos.so exports. Ids are numbered library by
// library in this order (CUDA first), so adding a library never renumbers
// the ones before it.
enum class Library { kCuda = 0, kCublas = 1, kCublasLt = 2, kNccl = 3 };
constexpr int kLibraryCount = 4;
const char* const kLibraryNames[kLibraryCount] = {"kCuda", "kCublas", "kCublasLt", "kNccl"};

struct Function {
  std::string name;  // symbol name (extern "C": the spelling)
  std::string ret;   // return type as spelled
  std::vector<Param> params;
  bool driver = false;  // declared in a driver header (cuda.h, cudaProfiler.h)
  Library library = Library::kCuda;
  int pass = 0;         // first parse that declared it (0 default, 1 ptds, 2 internal, 3 blas, 4 nccl)
  std::string file;     // header it came from (basename)
};

struct Pass {
  const char* tag;
  std::vector<std::string> defines;
  std::vector<const char*> headers;  // parsed (and included by the stubs) in this pass
};

// Headers whose functions are exported; driver ones first. The GL, EGL and
// VDPAU interop headers need the graphics headers and are left out.
const std::vector<const char*> kCudaHeaders = {"cuda.h", "cudaProfiler.h", "cuda_runtime_api.h",
                                               "cuda_profiler_api.h"};
// cuBLAS's v2 API (cublas_api.h declares the _v2 names apps built with
// cublas_v2.h link against; the legacy cublas.h API is not exported) and
// cuBLASLt.
const std::vector<const char*> kBlasHeaders = {"cublas_api.h", "cublasLt.h"};
// NCCL: every ncclX and its profiling alias pncclX.
const std::vector<const char*> kNcclHeaders = {"nccl.h"};

const Pass kPasses[] = {
    {"default", {}, kCudaHeaders},
    {"ptds", {"CUDA_API_PER_THREAD_DEFAULT_STREAM"}, kCudaHeaders},
    {"internal", {"__CUDA_API_VERSION_INTERNAL"}, kCudaHeaders},
    {"blas", {}, kBlasHeaders},
    {"nccl", {}, kNcclHeaders},
};

Library LibraryOfHeader(const std::string& base) {
  if (base == "cublas_api.h") return Library::kCublas;
  if (base == "cublasLt.h") return Library::kCublasLt;
  if (base == "nccl.h") return Library::kNccl;
  return Library::kCuda;
}

std::string ToString(CXString s) {
  const char* c = clang_getCString(s);
  std::string out = c != nullptr ? c : "";
  clang_disposeString(s);
  return out;
}

std::string Basename(const std::string& p) {
  size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

struct EnumValue {
  std::string name;
  long long value = 0;
};

// Enums whose every value phos must answer for (device attributes: each has
// a test that walks the whole enum). Keyed by the enum's tag name.
const char* const kEnums[] = {"CUdevice_attribute_enum", "cudaDeviceAttr"};

struct Collector {
  std::string include_dir;  // normalised, with trailing '/'
  int pass = 0;
  std::map<std::string, Function>* out = nullptr;
  std::map<std::string, std::vector<EnumValue>>* enums = nullptr;  // by tag; default pass only
  int errors = 0;
};

bool FromToolkitHeader(CXCursor c, const Collector& col, std::string* base) {
  CXFile file = nullptr;
  clang_getExpansionLocation(clang_getCursorLocation(c), &file, nullptr, nullptr, nullptr);
  if (file == nullptr) return false;
  std::string path = ToString(clang_getFileName(file));
  if (path.rfind(col.include_dir, 0) != 0) return false;
  *base = Basename(path);
  // The exported C ABI: the headers of this pass. Other toolkit headers
  // they pull in (driver_types.h, vector_types.h,
  // cuda_device_runtime_api.h, ...) declare types or device-side functions.
  for (const char* h : kPasses[col.pass].headers)
    if (*base == h) return true;
  return false;
}

void Collect(CXCursor c, Collector* col);
void CollectEnum(CXCursor c, Collector* col);

CXChildVisitResult Visit(CXCursor c, CXCursor /*parent*/, CXClientData data) {
  auto* col = static_cast<Collector*>(data);
  switch (clang_getCursorKind(c)) {
    case CXCursor_LinkageSpec:
    case CXCursor_UnexposedDecl:
      return CXChildVisit_Recurse;  // extern "C" { ... }
    case CXCursor_FunctionDecl:
      Collect(c, col);
      return CXChildVisit_Continue;
    case CXCursor_EnumDecl:
      CollectEnum(c, col);
      return CXChildVisit_Continue;
    default:
      // Namespaces, templates, classes: C++-only sections, not the C ABI.
      return CXChildVisit_Continue;
  }
}

void Collect(CXCursor c, Collector* col) {
  std::string base;
  if (!FromToolkitHeader(c, *col, &base)) return;
  // Inline helpers with bodies (e.g. the _ptsz wrapper of cuGetProcAddress_v2)
  // are not exported by the real libraries.
  if (clang_isCursorDefinition(c)) return;
  std::string name = ToString(clang_getCursorSpelling(c));
  std::string mangled = ToString(clang_Cursor_getMangling(c));
  if (mangled != name) return;  // C++ overload / not extern "C"
  CXType ft = clang_getCursorType(c);
  if (clang_isFunctionTypeVariadic(ft)) {
    std::fprintf(stderr, "phos_api_gen: variadic function %s is not supported\n", name.c_str());
    ++col->errors;
    return;
  }
  Function f;
  f.name = name;
  f.ret = ToString(clang_getTypeSpelling(clang_getResultType(ft)));
  f.driver = base == "cuda.h" || base == "cudaProfiler.h";
  f.library = LibraryOfHeader(base);
  f.pass = col->pass;
  f.file = base;
  int n = clang_Cursor_getNumArguments(c);
  for (int i = 0; i < n; ++i) {
    CXCursor a = clang_Cursor_getArgument(c, static_cast<unsigned>(i));
    f.params.push_back({ToString(clang_getTypeSpelling(clang_getCursorType(a))),
                        ToString(clang_getCursorSpelling(a))});
  }
  auto it = col->out->find(name);
  if (it == col->out->end()) {
    col->out->emplace(name, std::move(f));
    return;
  }
  // Same symbol seen in an earlier parse (or redeclared): keep the first.
  // A redeclaration with another signature in the same parse is an error.
  if (it->second.pass == col->pass) {
    bool same = it->second.ret == f.ret && it->second.params.size() == f.params.size();
    for (size_t i = 0; same && i < f.params.size(); ++i)
      same = it->second.params[i].type == f.params[i].type;
    if (!same) {
      std::fprintf(stderr, "phos_api_gen: conflicting declarations of %s\n", name.c_str());
      ++col->errors;
    }
  }
}

CXChildVisitResult VisitEnumerator(CXCursor c, CXCursor /*parent*/, CXClientData data) {
  if (clang_getCursorKind(c) == CXCursor_EnumConstantDecl) {
    static_cast<std::vector<EnumValue>*>(data)->push_back(
        {ToString(clang_getCursorSpelling(c)), clang_getEnumConstantDeclValue(c)});
  }
  return CXChildVisit_Continue;
}

void CollectEnum(CXCursor c, Collector* col) {
  if (col->enums == nullptr || !clang_isCursorDefinition(c)) return;
  const std::string tag = ToString(clang_getCursorSpelling(c));
  if (std::find(std::begin(kEnums), std::end(kEnums), tag) == std::end(kEnums)) return;
  std::vector<EnumValue>& list = (*col->enums)[tag];
  if (!list.empty()) return;  // a header seen twice
  clang_visitChildren(c, VisitEnumerator, &list);
}

bool Parse(const std::string& include_dir, int pass, std::map<std::string, Function>* out,
           std::map<std::string, std::vector<EnumValue>>* enums) {
  static constexpr const char* kFile = "phos_api_gen_input.cc";
  std::string src;
  for (const char* h : kPasses[pass].headers) src += std::string("#include <") + h + ">\n";
  std::vector<std::string> args = {"-x", "c++", "-std=c++17", "-I" + include_dir};
  for (const auto& d : kPasses[pass].defines) args.push_back("-D" + d);
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  CXUnsavedFile unsaved{kFile, src.data(), static_cast<unsigned long>(src.size())};

  CXIndex index = clang_createIndex(0, 0);
  CXTranslationUnit tu = nullptr;
  CXErrorCode err = clang_parseTranslationUnit2(index, kFile, argv.data(),
                                                static_cast<int>(argv.size()), &unsaved, 1,
                                                CXTranslationUnit_SkipFunctionBodies, &tu);
  if (err != CXError_Success || tu == nullptr) {
    std::fprintf(stderr, "phos_api_gen: libclang failed to parse the CUDA headers (%s pass, error %d)\n",
                 kPasses[pass].tag, static_cast<int>(err));
    clang_disposeIndex(index);
    return false;
  }
  bool ok = true;
  unsigned ndiag = clang_getNumDiagnostics(tu);
  for (unsigned d = 0; d < ndiag; ++d) {
    CXDiagnostic diag = clang_getDiagnostic(tu, d);
    if (clang_getDiagnosticSeverity(diag) >= CXDiagnostic_Error) {
      std::fprintf(stderr, "phos_api_gen (%s pass): %s\n", kPasses[pass].tag,
                   ToString(clang_formatDiagnostic(diag, clang_defaultDiagnosticDisplayOptions())).c_str());
      ok = false;
    }
    clang_disposeDiagnostic(diag);
  }
  Collector col;
  col.include_dir = include_dir;
  if (col.include_dir.empty() || col.include_dir.back() != '/') col.include_dir += '/';
  col.pass = pass;
  col.out = out;
  col.enums = enums;
  if (ok) clang_visitChildren(clang_getTranslationUnitCursor(tu), Visit, &col);
  clang_disposeTranslationUnit(tu);
  clang_disposeIndex(index);
  return ok && col.errors == 0;
}

// ---- emission --------------------------------------------------------------

std::string Enumerator(const std::string& name) { return "k_" + name; }

bool NeedsAlias(const std::string& type) {
  return type.find('(') != std::string::npos || type.find('[') != std::string::npos;
}

enum class RetKind { kRuntimeError, kDriverError, kBlasStatus, kNcclResult, kVoid, kString, kPointer, kValue };

RetKind Classify(const Function& f) {
  if (f.ret == "cudaError_t") return RetKind::kRuntimeError;
  if (f.ret == "CUresult") return RetKind::kDriverError;
  if (f.ret == "cublasStatus_t") return RetKind::kBlasStatus;
  if (f.ret == "ncclResult_t") return RetKind::kNcclResult;
  if (f.ret == "void") return RetKind::kVoid;
  if (f.ret == "const char *") return RetKind::kString;
  if (!f.ret.empty() && f.ret.back() == '*') return RetKind::kPointer;
  return RetKind::kValue;
}

void EmitHeader(const std::vector<const Function*>& fns, std::ostream& os) {
  size_t ndrv = 0, per_library[kLibraryCount] = {};
  for (auto* f : fns) {
    ndrv += f->driver ? 1 : 0;
    ++per_library[static_cast<int>(f->library)];
  }
  os << "// Generated by phos_api_gen from the CUDA toolkit headers. Do not edit.\n"
        "// One id per exported C function of cuda_runtime_api.h and cuda.h (and\n"
        "// their profiler companions) over all parses (default, per-thread\n"
        "// default stream, legacy unversioned), then of cuBLAS (cublas_api.h) and\n"
        "// cuBLASLt (cublasLt.h), then of NCCL (nccl.h). Ids are numbered library\n"
        "// by library (CUDA, cuBLAS, cuBLASLt, NCCL), each in the order of its\n"
        "// symbol names sorted by\n"
        "// strcmp, so a library added later never renumbers the CUDA ids.\n"
        "// Enumerators carry a k_ prefix because cuda.h #defines many plain names\n"
        "// to _v2 variants, which would otherwise rename (and collide) enumerators.\n"
        "#pragma once\n\n#include <cstddef>\n#include <cstdint>\n\n"
        "namespace phos::interposer {\n\n"
        "enum class ApiId : uint32_t {\n";
  for (size_t i = 0; i < fns.size(); ++i) os << "  " << Enumerator(fns[i]->name) << " = " << i << ",\n";
  os << "  kCount = " << fns.size() << ",\n};\n\n"
     << "inline constexpr size_t kApiCount = " << fns.size() << ";\n"
     << "// Driver API: cuda.h, cudaProfiler.h. Runtime API: cuda_runtime_api.h,\n"
        "// cuda_profiler_api.h.\n"
     << "inline constexpr size_t kApiDriverCount = " << ndrv << ";\n"
     << "inline constexpr size_t kApiRuntimeCount = " << per_library[0] - ndrv << ";\n"
     << "inline constexpr size_t kApiCublasCount = " << per_library[1] << ";\n"
     << "inline constexpr size_t kApiCublasLtCount = " << per_library[2] << ";\n"
     << "inline constexpr size_t kApiNcclCount = " << per_library[3] << ";\n\n"
     << "/// The library an exported function belongs to.\n"
        "enum class ApiLibrary : uint8_t { kCuda, kCublas, kCublasLt, kNccl };\n\n"
     << "// Symbol name of an id (\"?\" for out-of-range values).\n"
        "const char* ApiName(ApiId id);\n"
        "// True for driver API functions (cuda.h, cudaProfiler.h).\n"
        "bool ApiIsDriver(ApiId id);\n"
        "// The library of an id (kCuda for out-of-range values).\n"
        "ApiLibrary ApiLibraryOf(ApiId id);\n"
        "// Id of a symbol name; ApiId::kCount when not exported.\n"
        "ApiId ApiIdFromName(const char* name);\n\n"
        "// Address of the exported function named `name` (the strong hand-written\n"
        "// implementation when libphos.so has one, else the generated weak stub);\n"
        "// nullptr when phos does not export that name.\n"
        "const void* FindExport(const char* name);\n"
        "// cuGetProcAddress-style lookup: callers pass the base name (\"cuMemAlloc\")\n"
        "// and a CUDA version. Tries name_v3, name_v2, then name, and returns the\n"
        "// first that is exported (heuristic: the newest ABI variant the toolkit\n"
        "// headers declare; the version is accepted for the interface but not used\n"
        "// to pick older variants).\n"
        "const void* FindExportVersioned(const char* name, int cuda_version);\n\n"
        "}  // namespace phos::interposer\n";
}

void EmitStubs(const std::vector<const Function*>& fns, int pass, std::ostream& os) {
  os << "// Generated by phos_api_gen from the CUDA toolkit headers. Do not edit.\n"
        "// Parse configuration: "
     << kPasses[pass].tag
     << ".\n"
        "//\n"
        "// Every definition below is an exact-signature stub of a function the\n"
        "// headers declare. The headers are included in the same configuration the\n"
        "// generator parsed them in, so each stub redeclares the header's\n"
        "// prototype: a wrong signature fails to compile here (conflicting\n"
        "// declaration of an extern \"C\" function).\n"
        "//\n"
        "// The stubs are weak: a hand-written (strong) definition of the same\n"
        "// symbol elsewhere in libphos.so wins at link time and the stub is\n"
        "// dropped. Unimplemented functions log once and return\n"
        "// cudaErrorNotSupported / CUDA_ERROR_NOT_SUPPORTED.\n";
  for (const auto& d : kPasses[pass].defines) os << "#define " << d << "\n";
  for (const char* h : kPasses[pass].headers) os << "#include <" << h << ">\n";
  os << "\n#include \"phos_api_ids.h\"\n#include \"interposer/export/unsupported.h\"\n\n"
        "#define PHOS_STUB extern \"C\" __attribute__((weak, visibility(\"default\")))\n\n"
        "namespace {\nusing phos::interposer::ApiId;\nusing phos::interposer::ReportUnsupported;\n"
        "[[maybe_unused]] constexpr const char* kUnsupportedString = \"phos: not supported\";\n"
        "}  // namespace\n\n";
  for (const Function* f : fns) {
    if (f->pass != pass) continue;
    std::vector<std::string> decl, types;
    for (size_t i = 0; i < f->params.size(); ++i) {
      const Param& p = f->params[i];
      std::string pname = p.name.empty() ? "p" + std::to_string(i) : p.name;
      std::string type = p.type;
      if (NeedsAlias(p.type)) {
        type = "phos_" + f->name + "_p" + std::to_string(i) + "_t";
        os << "using " << type << " = " << p.type << ";\n";
      }
      decl.push_back(type + " " + pname);
      types.push_back(type);
    }
    std::string ret = f->ret;
    if (NeedsAlias(ret)) {
      std::string alias = "phos_" + f->name + "_ret_t";
      os << "using " << alias << " = " << ret << ";\n";
      ret = alias;
    }
    // The function's exact type: headers may add C++ overloads of a C name
    // (cublas_api.h's cublasSetEmulationStrategy), so the table takes the
    // address through it.
    os << "using phos_" << f->name << "_fn_t = " << ret << "(";
    for (size_t i = 0; i < types.size(); ++i) os << (i ? ", " : "") << types[i];
    os << ");\n";
    os << "PHOS_STUB " << ret << " " << f->name << "(";
    for (size_t i = 0; i < decl.size(); ++i) os << (i ? ", " : "") << decl[i];
    os << ") {\n  ReportUnsupported(ApiId::" << Enumerator(f->name) << ");\n";
    switch (Classify(*f)) {
      case RetKind::kRuntimeError: os << "  return cudaErrorNotSupported;\n"; break;
      case RetKind::kDriverError: os << "  return CUDA_ERROR_NOT_SUPPORTED;\n"; break;
      case RetKind::kBlasStatus: os << "  return CUBLAS_STATUS_NOT_SUPPORTED;\n"; break;
      // NCCL has no "not supported": ncclInvalidUsage is what it answers
      // for a call it cannot make in this configuration.
      case RetKind::kNcclResult: os << "  return ncclInvalidUsage;\n"; break;
      case RetKind::kVoid: break;
      case RetKind::kString: os << "  return kUnsupportedString;\n"; break;
      case RetKind::kPointer: os << "  return nullptr;\n"; break;
      case RetKind::kValue: os << "  return {};\n"; break;  // value-initialised
    }
    os << "}\n\n";
  }
  // Addresses of this configuration's symbols, for the name table.
  os << "namespace phos::interposer::generated {\n"
     << "void FillExports_" << kPasses[pass].tag << "(const void** table) {\n";
  for (const Function* f : fns) {
    if (f->pass != pass) continue;
    os << "  table[static_cast<size_t>(ApiId::" << Enumerator(f->name)
       << ")] = reinterpret_cast<const void*>(static_cast<phos_" << f->name << "_fn_t*>(&" << f->name
       << "));\n";
  }
  os << "}\n}  // namespace phos::interposer::generated\n";
}

void EmitTable(const std::vector<const Function*>& fns, std::ostream& os) {
  os << "// Generated by phos_api_gen from the CUDA toolkit headers. Do not edit.\n"
        "// Name -> id -> exported function pointer, sorted by name (strcmp).\n"
        "#include <cstring>\n#include <string>\n\n#include \"phos_api_ids.h\"\n\n"
        "namespace phos::interposer {\nnamespace generated {\n";
  for (const auto& p : kPasses) os << "void FillExports_" << p.tag << "(const void** table);\n";
  os << "}  // namespace generated\n\nnamespace {\n\n"
        "struct ExportEntry {\n  const char* name;\n  ApiId id;\n  bool driver;\n  ApiLibrary library;\n};\n\n"
        "// By id: each library's names sorted by strcmp (kSegments).\n"
        "constexpr ExportEntry kExports[] = {\n";
  size_t seg_begin[kLibraryCount] = {}, seg_end[kLibraryCount] = {};
  for (size_t i = 0; i < fns.size(); ++i) {
    const int lib = static_cast<int>(fns[i]->library);
    if (seg_end[lib] == 0) seg_begin[lib] = i;
    seg_end[lib] = i + 1;
    os << "    {\"" << fns[i]->name << "\", ApiId::" << Enumerator(fns[i]->name) << ", "
       << (fns[i]->driver ? "true" : "false") << ", ApiLibrary::" << kLibraryNames[lib] << "},\n";
  }
  os << "};\nstatic_assert(sizeof(kExports) / sizeof(kExports[0]) == kApiCount);\n\n"
        "// [begin, end) of each library's ids in kExports.\n"
        "struct Segment {\n  size_t begin, end;\n};\n"
        "constexpr Segment kSegments[] = {\n";
  for (int lib = 0; lib < kLibraryCount; ++lib) os << "    {" << seg_begin[lib] << ", " << seg_end[lib] << "},\n";
  os << "};\n\n"
        "// Function pointers are filled on first use (function-local static:\n"
        "// thread-safe, and usable from the app's own static initialisers).\n"
        "const void* const* Pointers() {\n"
        "  static const void** table = [] {\n"
        "    static const void* t[kApiCount] = {};\n";
  for (const auto& p : kPasses) os << "    generated::FillExports_" << p.tag << "(t);\n";
  os << "    return t;\n  }();\n  return table;\n}\n\n}  // namespace\n\n"
        "const char* ApiName(ApiId id) {\n"
        "  auto i = static_cast<size_t>(id);\n"
        "  return i < kApiCount ? kExports[i].name : \"?\";\n}\n\n"
        "bool ApiIsDriver(ApiId id) {\n"
        "  auto i = static_cast<size_t>(id);\n"
        "  return i < kApiCount && kExports[i].driver;\n}\n\n"
        "ApiLibrary ApiLibraryOf(ApiId id) {\n"
        "  auto i = static_cast<size_t>(id);\n"
        "  return i < kApiCount ? kExports[i].library : ApiLibrary::kCuda;\n}\n\n"
        "ApiId ApiIdFromName(const char* name) {\n"
        "  if (name == nullptr) return ApiId::kCount;\n"
        "  for (const Segment& seg : kSegments) {\n"
        "    size_t lo = seg.begin, hi = seg.end;\n"
        "    while (lo < hi) {\n"
        "      size_t mid = lo + (hi - lo) / 2;\n"
        "      int c = std::strcmp(kExports[mid].name, name);\n"
        "      if (c == 0) return kExports[mid].id;\n"
        "      if (c < 0) lo = mid + 1; else hi = mid;\n"
        "    }\n"
        "  }\n"
        "  return ApiId::kCount;\n}\n\n"
        "const void* FindExport(const char* name) {\n"
        "  ApiId id = ApiIdFromName(name);\n"
        "  return id == ApiId::kCount ? nullptr : Pointers()[static_cast<size_t>(id)];\n}\n\n"
        "const void* FindExportVersioned(const char* name, int /*cuda_version*/) {\n"
        "  if (name == nullptr) return nullptr;\n"
        "  for (const char* suffix : {\"_v3\", \"_v2\", \"\"}) {\n"
        "    if (const void* p = FindExport((std::string(name) + suffix).c_str())) return p;\n"
        "  }\n"
        "  return nullptr;\n}\n\n}  // namespace phos::interposer\n";
}

// phos_device_attributes.h: every enumerator of the attribute enums, for
// the code and tests that must answer each one. Enumerators that are
// aliases (two names, one value) are kept: a walk by name covers both.
void EmitEnums(const std::map<std::string, std::vector<EnumValue>>& enums, std::ostream& os) {
  os << "// Generated by phos_api_gen from the CUDA toolkit headers. Do not edit.\n"
        "// Every enumerator of CUdevice_attribute (cuda.h) and cudaDeviceAttr\n"
        "// (driver_types.h), with its value; the *_MAX / cudaDevAttrMax markers are\n"
        "// left out. kDeviceAttributeSlots bounds every value (an array indexed by\n"
        "// attribute number).\n"
        "#pragma once\n\nnamespace phos::interposer {\n\n"
        "struct EnumeratorInfo {\n  const char* name;\n  int value;\n};\n\n";
  long long max_value = 0;
  const std::pair<const char*, const char*> arrays[] = {{"CUdevice_attribute_enum", "kCuDeviceAttributes"},
                                                        {"cudaDeviceAttr", "kCudaDeviceAttrs"}};
  for (const auto& [tag, array] : arrays) {
    os << "inline constexpr EnumeratorInfo " << array << "[] = {\n";
    for (const EnumValue& e : enums.at(tag)) {
      if (e.name == "CU_DEVICE_ATTRIBUTE_MAX" || e.name == "cudaDevAttrMax") continue;
      max_value = std::max(max_value, e.value);
      os << "    {\"" << e.name << "\", " << e.value << "},\n";
    }
    os << "};\n\n";
  }
  os << "inline constexpr int kDeviceAttributeSlots = " << max_value + 1 << ";\n\n"
     << "}  // namespace phos::interposer\n";
}

// Always rewrites (the build runs the generator only when its inputs changed,
// and then expects fresh outputs).
bool Write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  std::string include_dir, out_dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--cuda-include") include_dir = argv[i + 1];
    else if (a == "--out-dir") out_dir = argv[i + 1];
  }
  if (include_dir.empty() || out_dir.empty()) {
    std::fprintf(stderr, "usage: phos_api_gen --cuda-include DIR --out-dir DIR\n");
    return 2;
  }
  std::map<std::string, Function> all;  // sorted by name (std::string <, same as strcmp)
  std::map<std::string, std::vector<EnumValue>> enums;
  for (int pass = 0; pass < static_cast<int>(std::size(kPasses)); ++pass)
    if (!Parse(include_dir, pass, &all, pass == 0 ? &enums : nullptr)) return 1;
  for (const char* tag : kEnums) {
    if (enums[tag].empty()) {
      std::fprintf(stderr, "phos_api_gen: enum %s not found in the headers\n", tag);
      return 1;
    }
  }

  std::vector<const Function*> fns;
  size_t per_pass[std::size(kPasses)] = {};
  size_t ndrv = 0;
  for (const auto& [name, f] : all) {
    fns.push_back(&f);
    ++per_pass[f.pass];
    ndrv += f.driver ? 1 : 0;
  }
  // Library by library, each sorted by name (std::stable_sort keeps the
  // map's name order within a library).
  std::stable_sort(fns.begin(), fns.end(),
                   [](const Function* a, const Function* b) { return a->library < b->library; });
  if (ndrv == 0 || ndrv == fns.size()) {
    std::fprintf(stderr, "phos_api_gen: found no functions in one of the headers\n");
    return 1;
  }

  std::ostringstream ids, table, attributes;
  EmitHeader(fns, ids);
  EmitTable(fns, table);
  EmitEnums(enums, attributes);
  bool ok = Write(out_dir + "/phos_api_ids.h", ids.str()) &&
            Write(out_dir + "/phos_api_table.cc", table.str()) &&
            Write(out_dir + "/phos_device_attributes.h", attributes.str());
  for (int pass = 0; pass < static_cast<int>(std::size(kPasses)); ++pass) {
    std::ostringstream stubs;
    EmitStubs(fns, pass, stubs);
    std::string file = pass == 0 ? "/phos_api_stubs.cc"
                                 : std::string("/phos_api_stubs_") + kPasses[pass].tag + ".cc";
    ok = ok && Write(out_dir + file, stubs.str());
  }
  if (!ok) {
    std::fprintf(stderr, "phos_api_gen: cannot write to %s\n", out_dir.c_str());
    return 1;
  }
  std::printf("phos_api_gen: %zu functions (%zu driver; %zu default, %zu ptds-only, "
              "%zu legacy/internal-only, %zu cuBLAS/cuBLASLt, %zu NCCL)\n",
              fns.size(), ndrv, per_pass[0], per_pass[1], per_pass[2], per_pass[3], per_pass[4]);
  return 0;
}
