// Kernel signatures -> access roles, on real nvcc 13 mangled names.
//
// The mangled names and .nv.info parameter tables below were obtained by
// compiling kernels_a.cu and kernels_b.cu (in this directory) with nvcc
// 13.0.88 (`nvcc -arch=sm_80 -std=c++17 -cubin`), listing the FUNC symbols
// with `readelf -sW` and decoding each .nv.info.<kernel> section's
// EIATTR_KPARAM_INFO records (ordinal, offset, size). The thrust/CUB names
// come from kernels_thrust.cu the same way (with --extended-lambda).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "signature/demangle.h"
#include "signature/kernel_signature.h"
#include "signature/signature_parser.h"

namespace phos::signature {
namespace {

using R = AccessRole;

struct Expect {
  R role;
  bool table = false;  // pointee_is_pointer
};

KernelSignature MustResolve(const std::string& name, const std::vector<ParamInfo>& kp) {
  KernelSignature sig;
  Status st = ResolveKernelSignature(name, kp, &sig);
  EXPECT_TRUE(st.ok()) << name << ": " << st.ToString();
  return sig;
}

void ExpectRoles(const KernelSignature& sig, const std::vector<Expect>& want) {
  ASSERT_EQ(sig.params.size(), want.size()) << sig.ToString();
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(sig.params[i].ordinal, i);
    EXPECT_EQ(sig.params[i].role, want[i].role)
        << "param " << i << " of " << sig.ToString() << ": got " << AccessRoleName(sig.params[i].role);
    EXPECT_EQ(sig.params[i].pointee_is_pointer, want[i].table) << "param " << i << " of " << sig.ToString();
  }
}

void ExpectLayout(const KernelSignature& sig, const std::vector<ParamInfo>& kp) {
  ASSERT_EQ(sig.params.size(), kp.size());
  for (size_t i = 0; i < kp.size(); ++i) {
    EXPECT_TRUE(sig.params[i].layout_known) << i;
    EXPECT_EQ(sig.params[i].offset, kp[i].offset) << i;
    EXPECT_EQ(sig.params[i].size, kp[i].size) << i;
  }
}

// ---------------------------------------------------------------- demangle

TEST(SignatureDemangle, MangledOrExternC) {
  EXPECT_TRUE(IsMangledName("_Z2tkIfEvPKT_PS0_i"));
  EXPECT_FALSE(IsMangledName("ck"));
  EXPECT_FALSE(IsMangledName("_Z"));
  std::string d;
  ASSERT_TRUE(Demangle("_Z2tkIfEvPKT_PS0_i", &d).ok());
  EXPECT_EQ(d, "void tk<float>(float const*, float*, int)");
  EXPECT_EQ(Demangle("_Zgarbage", &d).code(), Status::Code::kCorruption);
}

TEST(SignatureDemangle, SplitParameters) {
  std::string fn;
  std::vector<std::string> p;
  ASSERT_TRUE(SplitDemangledSignature("void tk<float>(float const*, float*, int)", &fn, &p).ok());
  EXPECT_EQ(fn, "void tk<float>");
  EXPECT_EQ(p, (std::vector<std::string>{"float const*", "float*", "int"}));

  ASSERT_TRUE(SplitDemangledSignature(
                  "void arrk<float>(Arr<float, 3>, float (*) [3], float volatile*, float const volatile*)",
                  &fn, &p).ok());
  EXPECT_EQ(p, (std::vector<std::string>{"Arr<float, 3>", "float (*) [3]", "float volatile*",
                                         "float const volatile*"}));

  ASSERT_TRUE(SplitDemangledSignature("void autok<(ns::Color)1>(int*)", &fn, &p).ok());
  EXPECT_EQ(fn, "void autok<(ns::Color)1>");
  EXPECT_EQ(p, (std::vector<std::string>{"int*"}));

  // operator< between parenthesised operands inside template arguments.
  ASSERT_TRUE(SplitDemangledSignature("void k<((1)<(2)), 3>(Foo<((1)>(2)), int>, int)", &fn, &p).ok());
  EXPECT_EQ(p, (std::vector<std::string>{"Foo<((1)>(2)), int>", "int"}));

  ASSERT_TRUE(SplitDemangledSignature("f()", &fn, &p).ok());
  EXPECT_TRUE(p.empty());
  ASSERT_TRUE(SplitDemangledSignature("f(void)", &fn, &p).ok());
  EXPECT_TRUE(p.empty());
  EXPECT_FALSE(SplitDemangledSignature("gval", &fn, &p).ok());
  EXPECT_FALSE(SplitDemangledSignature("f(int))", &fn, &p).ok());
  EXPECT_FALSE(SplitDemangledSignature("f(int, , int)", &fn, &p).ok());
}

TEST(SignatureSanitize, UnknownNamesBecomePlaceholders) {
  std::vector<std::string> ph;
  EXPECT_EQ(SanitizeTypeForClang("a::(anonymous namespace)::b::S const*", &ph), "__phos_t0 const*");
  EXPECT_EQ(SanitizeTypeForClang("ns::Functor<int>", &ph), "__phos_t1");
  EXPECT_EQ(SanitizeTypeForClang("a::(anonymous namespace)::b::S", &ph), "__phos_t0");
  EXPECT_EQ(SanitizeTypeForClang("Wrap<float const&>", &ph), "__phos_t2");
  EXPECT_EQ(SanitizeTypeForClang("float2", &ph), "float2");
  EXPECT_EQ(SanitizeTypeForClang("unsigned long long", &ph), "unsigned long long");
  EXPECT_EQ(SanitizeTypeForClang("decltype(nullptr)", &ph), "decltype(nullptr)");
  EXPECT_EQ(SanitizeTypeForClang("main::{lambda(float*)#1}", &ph), "__phos_t3");
  EXPECT_EQ(SanitizeTypeForClang("run(int)::Local const*", &ph), "__phos_t4 const*");
  EXPECT_EQ(SanitizeTypeForClang("void (*)(ns::X<int>, int)", &ph), "void (*)(__phos_t5, int)");
  EXPECT_EQ(SanitizeTypeForClang("int Foo::*", &ph), "int __phos_t6::*");
  EXPECT_EQ(SanitizeTypeForClang("float* restrict", &ph), "float* __restrict");
  EXPECT_EQ(ph.size(), 7u);
  EXPECT_EQ(ph[0], "a::(anonymous namespace)::b::S");
}

// --------------------------------------------------------- parser, direct

TEST(SignatureParser, PointerConstness) {
  std::vector<ParsedParam> out;
  std::vector<std::string> types = {
      "float const*",         // const T*          -> read
      "float*",               // T*                -> readwrite
      "float* const",         // T* const          -> readwrite
      "float const* const",   // const T* const    -> read
      "float**",              // pointer table     -> readwrite, table
      "float const* const*",  // const table       -> read, table
      "float* const*",        // const table of mutable pointers -> read, table
      "void*",                "void const*",
      "float const (*) [4]",  // pointer to const array -> read
      "float* __restrict",
  };
  ASSERT_TRUE(ParseParameterTypes(types, &out).ok());
  ASSERT_EQ(out.size(), types.size());
  for (const auto& p : out) ASSERT_TRUE(p.parsed) << p.error;
  std::vector<Expect> want = {{R::kRead},           {R::kReadWrite},       {R::kReadWrite},
                              {R::kRead},           {R::kReadWrite, true}, {R::kRead, true},
                              {R::kRead, true},     {R::kReadWrite},       {R::kRead},
                              {R::kRead},           {R::kReadWrite}};
  for (size_t i = 0; i < types.size(); ++i) {
    EXPECT_EQ(out[i].role, want[i].role) << types[i];
    EXPECT_EQ(out[i].pointee_is_pointer, want[i].table) << types[i];
    EXPECT_TRUE(out[i].size_known);
    EXPECT_EQ(out[i].size, 8u) << types[i];
  }
}

TEST(SignatureParser, ScalarsAggregatesReferences) {
  std::vector<ParsedParam> out;
  std::vector<std::string> types = {
      "int",           "unsigned long long", "double",     "bool",       "__int128",
      "decltype(nullptr)", "int Foo::*",     "MyStruct",   "ns::Foo<int>", "float2",
      "int4",          "__half",             "Holder<float> const&", "float const&", "_Float16",
      "main::{lambda(float*)#1}",            "char4",      "dim3",
  };
  ASSERT_TRUE(ParseParameterTypes(types, &out).ok());
  std::vector<R> want = {R::kNone,      R::kNone,      R::kNone,      R::kNone,      R::kNone,
                         R::kNone,      R::kNone,      R::kScanWords, R::kScanWords, R::kScanWords,
                         R::kScanWords, R::kScanWords, R::kScanWords, R::kNone,      R::kNone,
                         R::kScanWords, R::kScanWords, R::kScanWords};
  ASSERT_EQ(out.size(), want.size());
  for (size_t i = 0; i < types.size(); ++i) {
    ASSERT_TRUE(out[i].parsed) << types[i] << ": " << out[i].error;
    EXPECT_EQ(out[i].role, want[i]) << types[i];
  }
  // Sizes of the CUDA types follow vector_types.h; placeholders are unknown.
  EXPECT_FALSE(out[7].size_known);
  EXPECT_EQ(out[9].size, 8u);
  EXPECT_EQ(out[9].align, 8u);
  EXPECT_EQ(out[10].size, 16u);
  EXPECT_EQ(out[10].align, 16u);
  EXPECT_EQ(out[11].size, 2u);
  EXPECT_EQ(out[16].size, 4u);
  EXPECT_EQ(out[17].size, 12u);
  EXPECT_EQ(out[17].align, 4u);
}

TEST(SignatureParser, OneBadTypeDoesNotSpoilTheOthers) {
  std::vector<ParsedParam> out;
  ASSERT_TRUE(ParseParameterTypes({"float*", "int (", "float const*"}, &out).ok());
  EXPECT_TRUE(out[0].parsed);
  EXPECT_FALSE(out[1].parsed);
  EXPECT_FALSE(out[1].error.empty());
  EXPECT_TRUE(out[2].parsed);
  EXPECT_EQ(out[2].role, R::kRead);
}

// ------------------------------------------------------- real nvcc names

TEST(SignatureRealNames, TemplateFloatAndDouble) {
  std::vector<ParamInfo> kp = {{0, 0, 8}, {1, 8, 8}, {2, 16, 4}};
  for (const char* name : {"_Z2tkIfEvPKT_PS0_i", "_Z2tkIdEvPKT_PS0_i"}) {
    KernelSignature sig = MustResolve(name, kp);
    EXPECT_FALSE(sig.extern_c);
    EXPECT_TRUE(sig.fully_typed);
    EXPECT_TRUE(sig.from_nv_info);
    ExpectRoles(sig, {{R::kRead}, {R::kReadWrite}, {R::kNone}});
    ExpectLayout(sig, kp);
    EXPECT_EQ(sig.ParamBufferSize(), 20u);
  }
  KernelSignature d = MustResolve("_Z2tkIdEvPKT_PS0_i", {});
  EXPECT_EQ(d.demangled, "void tk<double>(double const*, double*, int)");
  EXPECT_EQ(d.params[0].type, "double const*");
  // Without .nv.info the layout comes from the types.
  ExpectLayout(d, kp);
}

TEST(SignatureRealNames, Namespaces) {
  KernelSignature n = MustResolve("_ZN5outer5inner6nestedEPfi", {{0, 0, 8}, {1, 8, 4}});
  EXPECT_EQ(n.demangled, "outer::inner::nested(float*, int)");
  ExpectRoles(n, {{R::kReadWrite}, {R::kNone}});

  KernelSignature a = MustResolve("_ZN36_GLOBAL__N__d6a9cdac_4_k_cu_26b47ebf4anonEPi", {{0, 0, 8}});
  EXPECT_EQ(a.demangled, "(anonymous namespace)::anon(int*)");
  ExpectRoles(a, {{R::kReadWrite}});

  // Struct in a namespace nested in an anonymous namespace, by value and by
  // const pointer to const.
  std::vector<ParamInfo> kp = {{0, 0, 8}, {1, 8, 8}};
  KernelSignature d = MustResolve("_ZN1a37_GLOBAL__N__53ce6f53_5_k2_cu_838ce6771b4deepENS1_1SEPKS2_", kp);
  EXPECT_EQ(d.params[0].type, "a::(anonymous namespace)::b::S");
  ExpectRoles(d, {{R::kScanWords}, {R::kRead}});
  EXPECT_TRUE(d.fully_typed);

  KernelSignature f = MustResolve("_Z5applyIN2ns7FunctorIiEEEvT_PKfPf", {{0, 0, 16}, {1, 16, 8}, {2, 24, 8}});
  ExpectRoles(f, {{R::kScanWords}, {R::kRead}, {R::kReadWrite}});
}

TEST(SignatureRealNames, ReferencesInTemplateArguments) {
  // template <typename T, const T& R> refk(T*), R = an __device__ variable.
  KernelSignature r = MustResolve("_Z4refkIiL_ZN34_INTERNAL_d6a9cdac_4_k_cu_26b47ebf4gvalEEEvPT_", {{0, 0, 8}});
  EXPECT_EQ(r.demangled, "void refk<int, _INTERNAL_d6a9cdac_4_k_cu_26b47ebf::gval>(int*)");
  ExpectRoles(r, {{R::kReadWrite}});

  // refarg<const float&>(Wrap<const float&>, float*): a 4-byte struct.
  std::vector<ParamInfo> kp = {{0, 0, 4}, {1, 8, 8}};
  KernelSignature w = MustResolve("_Z6refargIRKfEv4WrapIT_EPf", kp);
  EXPECT_EQ(w.params[0].type, "Wrap<float const&>");
  ExpectRoles(w, {{R::kNone}, {R::kReadWrite}});  // too small to hold an address
  KernelSignature w2 = MustResolve("_Z6refargIRKfEv4WrapIT_EPf", {});
  ExpectRoles(w2, {{R::kScanWords}, {R::kReadWrite}});  // size unknown: scan
  EXPECT_FALSE(w2.params[0].layout_known);
  EXPECT_FALSE(w2.params[1].layout_known);  // after an unknown size
}

TEST(SignatureRealNames, ConstPointers) {
  // cpc(const float* const a, float* const b, const int* c): top-level
  // const is not mangled; T* const is T* for the launch.
  KernelSignature s = MustResolve("_Z3cpcPKfPfPKi", {{0, 0, 8}, {1, 8, 8}, {2, 16, 8}});
  EXPECT_EQ(s.demangled, "cpc(float const*, float*, int const*)");
  ExpectRoles(s, {{R::kRead}, {R::kReadWrite}, {R::kRead}});
  KernelSignature v = MustResolve("_Z4arrkIfEv3ArrIT_Li3EEPA3_S1_PVS1_PVKS1_",
                                  {{0, 0, 12}, {1, 16, 8}, {2, 24, 8}, {3, 32, 8}});
  ExpectRoles(v, {{R::kScanWords}, {R::kReadWrite}, {R::kReadWrite}, {R::kRead}});
}

TEST(SignatureRealNames, StructsOfPointersByValue) {
  std::vector<ParamInfo> kp = {{0, 0, 24}, {1, 24, 8}};
  KernelSignature s = MustResolve("_Z7structk4PtrsPS_", kp);
  EXPECT_EQ(s.demangled, "structk(Ptrs, Ptrs*)");
  ExpectRoles(s, {{R::kScanWords}, {R::kReadWrite}});
  ExpectLayout(s, kp);
  EXPECT_EQ(ScanWordCount(s.params[0].size), 3u);

  KernelSignature h = MustResolve("_Z5holdkIfEv6HolderIT_EPKS2_", {{0, 0, 8}, {1, 8, 8}});
  ExpectRoles(h, {{R::kScanWords}, {R::kRead}});
}

TEST(SignatureRealNames, VectorTypes) {
  std::vector<ParamInfo> kp = {{0, 0, 8}, {1, 16, 16}, {2, 32, 8}, {3, 40, 8}};
  KernelSignature s = MustResolve("_Z3vec6float24int4PS_PKS0_", kp);
  EXPECT_EQ(s.demangled, "vec(float2, int4, float2*, int4 const*)");
  ExpectRoles(s, {{R::kScanWords}, {R::kScanWords}, {R::kReadWrite}, {R::kRead}});
  // CUDA's vector alignments give the same layout as .nv.info.
  KernelSignature t = MustResolve("_Z3vec6float24int4PS_PKS0_", {});
  ExpectLayout(t, kp);

  KernelSignature c = MustResolve("_Z6colorkN2ns5ColorE6__half7__half27double24dim3",
                                  {{0, 0, 4}, {1, 4, 2}, {2, 8, 4}, {3, 16, 16}, {4, 32, 12}});
  ExpectRoles(c, {{R::kNone}, {R::kNone}, {R::kNone}, {R::kScanWords}, {R::kScanWords}});
}

TEST(SignatureRealNames, PointerToPointer) {
  KernelSignature s = MustResolve("_Z2ppPPfPKPKfi", {{0, 0, 8}, {1, 8, 8}, {2, 16, 4}});
  EXPECT_EQ(s.demangled, "pp(float**, float const* const*, int)");
  ExpectRoles(s, {{R::kReadWrite, true}, {R::kRead, true}, {R::kNone}});
}

TEST(SignatureRealNames, Enums) {
  std::vector<ParamInfo> kp = {{0, 0, 4}, {1, 4, 1}, {2, 8, 8}};
  KernelSignature s = MustResolve("_Z5enumk4Mode6ScopedPi", kp);
  ExpectRoles(s, {{R::kNone}, {R::kNone}, {R::kReadWrite}});
  // The name alone cannot tell an enum from a struct: scan (conservative).
  KernelSignature u = MustResolve("_Z5enumk4Mode6ScopedPi", {});
  ExpectRoles(u, {{R::kScanWords}, {R::kScanWords}, {R::kReadWrite}});
  // Enum as a non-type template argument.
  ExpectRoles(MustResolve("_Z5autokILN2ns5ColorE1EEvPi", {{0, 0, 8}}), {{R::kReadWrite}});
  ExpectRoles(MustResolve("_Z5autokILc97EEvPi", {{0, 0, 8}}), {{R::kReadWrite}});
}

TEST(SignatureRealNames, ScalarsArraysFunctionPointersVariadic) {
  ExpectRoles(MustResolve("_Z3arrPA4_fycbs", {{0, 0, 8}, {1, 8, 8}, {2, 16, 1}, {3, 17, 1}, {4, 18, 2}}),
              {{R::kReadWrite}, {R::kNone}, {R::kNone}, {R::kNone}, {R::kNone}});
  ExpectRoles(MustResolve("_Z4fptrPFviEPvPKv", {{0, 0, 8}, {1, 8, 8}, {2, 16, 8}}),
              {{R::kReadWrite}, {R::kReadWrite}, {R::kRead}});
  ExpectRoles(MustResolve("_Z8variadicIJPiPKdlEEvDpT_", {{0, 0, 8}, {1, 8, 8}, {2, 16, 8}}),
              {{R::kReadWrite}, {R::kRead}, {R::kNone}});
  ExpectRoles(MustResolve("_Z4lonkxhnPeDn", {{0, 0, 8}, {1, 8, 1}, {2, 16, 16}, {3, 32, 8}, {4, 40, 8}}),
              {{R::kNone}, {R::kNone}, {R::kNone}, {R::kReadWrite}, {R::kNone}});
  ExpectRoles(MustResolve("_Z2tnI6HolderIdELin2EEvPT_", {{0, 0, 8}}), {{R::kReadWrite}});
  ExpectRoles(MustResolve("_Z2tnIfLi4EEvPT_", {{0, 0, 8}}), {{R::kReadWrite}});
}

TEST(SignatureRealNames, ThrustAndCub) {
  // transform_kernel<..., long, run(...)::{lambda(float)#1}, ...>(long, int,
  //   lambda, normal_iterator<device_ptr<float>>, kernel_arg<float*>)
  const std::string lambda_kernel =
      "_ZN3cub17CUB_300001_SM_8006detail9transform16transform_kernelINS2_10policy_hubILb1EN4cuda3std3__"
      "45tupleIJN6thrust23THRUST_300001_SM_800_NS6detail15normal_iteratorINSA_10device_ptrIfEEEEEEEE10po"
      "licy1000ElZ3runRNSA_13device_vectorIfNSA_16device_allocatorIfEEEESN_EUlfE_SF_JPfEEEvT0_iT1_T2_DpNS2"
      "_10kernel_argIT3_EE";
  KernelSignature t = MustResolve(lambda_kernel, {{0, 0, 8}, {1, 8, 4}, {2, 12, 1}, {3, 16, 8}, {4, 24, 16}});
  EXPECT_TRUE(t.fully_typed) << t.ToString();
  ExpectRoles(t, {{R::kNone}, {R::kNone}, {R::kNone}, {R::kScanWords}, {R::kScanWords}});
  EXPECT_NE(t.params[2].type.find("::{lambda(float)#1}"), std::string::npos);

  // DeviceReduceKernel<...>(normal_iterator, float*, unsigned long long,
  //   GridEvenShare<unsigned long long>, plus<float>, __identity)
  const std::string reduce_kernel =
      "_ZN3cub17CUB_300001_SM_8006detail6reduce18DeviceReduceKernelINS2_10policy_hubIfyN4cuda3std3__44pl"
      "usIfEEE10Policy1000EN6thrust23THRUST_300001_SM_800_NS6detail15normal_iteratorINSD_10device_ptrIfE"
      "EEEyS9_fNS7_10__identityEEEvT0_PT3_T1_NS0_13GridEvenShareISN_EET2_T4_";
  KernelSignature r =
      MustResolve(reduce_kernel, {{0, 0, 8}, {1, 8, 8}, {2, 16, 8}, {3, 24, 72}, {4, 96, 1}, {5, 97, 1}});
  EXPECT_TRUE(r.fully_typed) << r.ToString();
  ExpectRoles(r, {{R::kScanWords}, {R::kReadWrite}, {R::kNone}, {R::kScanWords}, {R::kNone}, {R::kNone}});
}

TEST(SignatureRealNames, ExternC) {
  // extern "C" ck(float* a, int n, double d, Ptrs s)
  std::vector<ParamInfo> kp = {{0, 0, 8}, {1, 8, 4}, {2, 16, 8}, {3, 24, 24}};
  KernelSignature s = MustResolve("ck", kp);
  EXPECT_TRUE(s.extern_c);
  EXPECT_FALSE(s.fully_typed);
  EXPECT_TRUE(s.demangled.empty());
  // Every 8-byte parameter is a candidate pointer, even the double.
  ExpectRoles(s, {{R::kReadWrite}, {R::kNone}, {R::kReadWrite}, {R::kScanWords}});
  ExpectLayout(s, kp);
  for (const auto& p : s.params) EXPECT_FALSE(p.typed);

  KernelSignature none;
  EXPECT_EQ(ResolveKernelSignature("ck", {}, &none).code(), Status::Code::kNotFound);

  // .nv.info read and empty: a kernel without parameters.
  std::vector<KernelSignature> sigs;
  std::vector<Status> sts;
  ResolveKernelSignatures({KernelRequest{"noargs", {}, true}}, &sigs, &sts);
  ASSERT_TRUE(sts[0].ok()) << sts[0].ToString();
  EXPECT_TRUE(sigs[0].params.empty());
}

TEST(SignatureResolve, FallbacksAndErrors) {
  // Parameter count differs from .nv.info: size-only rule.
  KernelSignature s = MustResolve("_Z2tkIfEvPKT_PS0_i", {{0, 0, 8}, {1, 8, 8}});
  EXPECT_FALSE(s.fully_typed);
  ExpectRoles(s, {{R::kReadWrite}, {R::kReadWrite}});

  // Undemanglable _Z name with a table: size-only rule; without: NotFound.
  KernelSignature g = MustResolve("_Zgarbage", {{0, 0, 8}, {1, 8, 16}});
  ExpectRoles(g, {{R::kReadWrite}, {R::kScanWords}});
  EXPECT_EQ(ResolveKernelSignature("_Zgarbage", {}, &g).code(), Status::Code::kNotFound);

  // Bad ordinals.
  EXPECT_EQ(ResolveKernelSignature("_Z2tkIfEvPKT_PS0_i", {{0, 0, 8}, {0, 8, 8}, {2, 16, 4}}, &g).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(ResolveKernelSignature("ck", {{1, 0, 8}}, &g).code(), Status::Code::kInvalidArgument);

  // Ordinals in any order.
  KernelSignature o = MustResolve("_Z2tkIfEvPKT_PS0_i", {{2, 16, 4}, {0, 0, 8}, {1, 8, 8}});
  ExpectRoles(o, {{R::kRead}, {R::kReadWrite}, {R::kNone}});

  // No parameters.
  KernelSignature v = MustResolve("_Z3foov", {});
  EXPECT_TRUE(v.params.empty());
  EXPECT_TRUE(v.fully_typed);
}

TEST(SignatureResolve, BatchMatchesSingle) {
  std::vector<KernelRequest> reqs = {
      {"_Z2tkIfEvPKT_PS0_i", {{0, 0, 8}, {1, 8, 8}, {2, 16, 4}}, true},
      {"_Z2ppPPfPKPKfi", {}, false},
      {"ck", {}, false},
      {"_Z3vec6float24int4PS_PKS0_", {{0, 0, 8}, {1, 16, 16}, {2, 32, 8}, {3, 40, 8}}, true},
  };
  std::vector<KernelSignature> sigs;
  std::vector<Status> sts;
  ResolveKernelSignatures(reqs, &sigs, &sts);
  ASSERT_EQ(sigs.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    KernelSignature one;
    Status st = ResolveKernelSignature(reqs[i].mangled_name, reqs[i].kparams, &one);
    EXPECT_EQ(st.code(), sts[i].code()) << reqs[i].mangled_name;
    if (st.ok()) {
      EXPECT_EQ(one, sigs[i]) << one.ToString() << " vs " << sigs[i].ToString();
    }
  }
  EXPECT_EQ(sts[2].code(), Status::Code::kNotFound);
}

TEST(SignatureResolve, ToString) {
  KernelSignature s = MustResolve("_Z2ppPPfPKPKfi", {{0, 0, 8}, {1, 8, 8}, {2, 16, 4}});
  EXPECT_EQ(s.ToString(),
            "pp(float**, float const* const*, int) [0:float** readwrite(table)@0+8, "
            "1:float const* const* read(table)@8+8, 2:int none@16+4]");
}

}  // namespace
}  // namespace phos::signature
