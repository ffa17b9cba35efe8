// cuBLASLt in libphos.so (docs/interposer.md "cuBLAS"): handles,
// descriptors, layouts and preferences are app state — each lives in the
// opaque struct cuBLASLt's header gives it (the *Init_internal forms hand
// us the app's own storage), tagged so a stranger's pointer is refused —
// and cublasLtMatmul becomes one kBlasLtMatmul request that carries what
// they say. Heuristics answer one algorithm needing no workspace: phosd
// chooses the real one (cuda backend) or computes with OpenBLAS (sim).
//
// Honoured: compute/scale type, pointer mode host or device, transa/b,
// every epilogue cuBLASLt defines — bias, ReLU, GELU, their aux outputs and
// gradients, bias gradients — with their bias and aux attributes (pointer,
// data type, leading dimension, batch stride), column-major layouts with
// batch count and strided-batch offset. Anything else set to a non-default
// value (FP8 scales, amax, alpha vectors, row-major or tiled orders) makes
// the matmul answer CUBLAS_STATUS_NOT_SUPPORTED, naming it once.
#include <cublasLt.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_set>

#include "interposer/client/client_internal.h"
#include "interposer/client/cublas_internal.h"
#include "interposer/client/handles.h"
#include "protocol/blas_spec.h"

namespace phos::client {
namespace {

constexpr uint32_t kLayoutMagic = 0x4c4c5450;  // "PTLL"
constexpr uint32_t kDescMagic = 0x444c5450;    // "PTLD"
constexpr uint32_t kPrefMagic = 0x504c5450;    // "PTLP"

struct LayoutState {
  uint32_t magic;
  int32_t type;
  int32_t order;
  int32_t batch;
  uint64_t rows, cols;
  int64_t ld;
  int64_t stride;  // strided-batch offset, elements
  int32_t unsupported;  // first attribute set to what phos does not honour (+1), 0: none
};
static_assert(sizeof(LayoutState) <= sizeof(cublasLtMatrixLayoutOpaque_t));

struct DescState {
  uint32_t magic;
  int32_t compute;
  int32_t scale;
  int32_t pointer_mode;
  int32_t transa, transb, transc;
  uint32_t epilogue;
  int32_t bias_type;  // -1: the default (D's type)
  uint64_t bias;
  int64_t bias_stride;
  uint64_t aux;
  int64_t aux_ld;
  int64_t aux_stride;
  int32_t aux_type;   // -1: the default (D's type)
  int32_t unsupported;  // first attribute set to what phos does not honour (+1), 0: none
};
static_assert(sizeof(DescState) <= sizeof(cublasLtMatmulDescOpaque_t));

struct PrefState {
  uint32_t magic;
  uint32_t search_mode;
  uint64_t max_workspace;
};
static_assert(sizeof(PrefState) <= sizeof(cublasLtMatmulPreferenceOpaque_t));

struct LtHandle {
  uint32_t magic = kDescMagic;
};

LiveHandles<LtHandle>& Handles() {
  static auto* h = new LiveHandles<LtHandle>;
  return *h;
}
// A handle of cublasLtCreate, or a live cuBLAS handle: PyTorch on CUDA
// passes its cuBLAS handle as its cuBLASLt handle
// (at::cuda::getCurrentCUDABlasLtHandle is a reinterpret_cast of
// getCurrentCUDABlasHandle), which the real libraries accept; refusing it
// stopped every nn.Linear under phos on a GPU (docs/gpu-report.md, third
// session). An LtHandle holds no state, so either kind serves every
// cuBLASLt call; cublasLtDestroy still takes only its own.
bool LiveHandle(cublasLtHandle_t h) {
  return Handles().Contains(reinterpret_cast<LtHandle*>(h)) ||
         FindBlasHandle(reinterpret_cast<cublasHandle_t>(h)) != nullptr;
}

template <typename State, typename Opaque>
State* StateOf(Opaque* p, uint32_t magic) {
  auto* s = reinterpret_cast<State*>(p);
  return s != nullptr && s->magic == magic ? s : nullptr;
}

/// Copies a `T` attribute value in from the app's buffer.
template <typename T>
bool Take(const void* buf, size_t size, T* out) {
  if (buf == nullptr || size != sizeof(T)) return false;
  std::memcpy(out, buf, sizeof(T));
  return true;
}
/// Copies `v` out (the get-attribute protocol: size 0 asks for the size).
template <typename T>
cublasStatus_t Give(const T& v, void* buf, size_t size, size_t* written) {
  if (size == 0 && written != nullptr) {
    *written = sizeof(T);
    return CUBLAS_STATUS_SUCCESS;
  }
  if (buf == nullptr || size < sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(buf, &v, sizeof(T));
  if (written != nullptr) *written = sizeof(T);
  return CUBLAS_STATUS_SUCCESS;
}

/// An attribute phos accepts only at its default (zero) value.
bool IsZero(const void* buf, size_t size) {
  if (buf == nullptr) return true;
  const auto* p = static_cast<const unsigned char*>(buf);
  for (size_t i = 0; i < size; ++i)
    if (p[i] != 0) return false;
  return true;
}

void InitDesc(DescState* d, cublasComputeType_t compute, cudaDataType_t scale) {
  std::memset(d, 0, sizeof *d);
  d->magic = kDescMagic;
  d->compute = compute;
  d->scale = scale;
  d->pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  d->transa = d->transb = d->transc = CUBLAS_OP_N;
  d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  d->bias_type = -1;
  d->aux_type = -1;
}

void InitLayout(LayoutState* l, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
  std::memset(l, 0, sizeof *l);
  l->magic = kLayoutMagic;
  l->type = type;
  l->order = CUBLASLT_ORDER_COL;
  l->batch = 1;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
}

}  // namespace
}  // namespace phos::client

using namespace phos::client;  // NOLINT

// ---------------------------------------------------------------- handle, versions

PHOS_EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (Initialised() != cudaSuccess) return CUBLAS_STATUS_NOT_INITIALIZED;
  *handle = reinterpret_cast<cublasLtHandle_t>(Handles().Create());
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  return Handles().Destroy(reinterpret_cast<LtHandle*>(handle)) ? CUBLAS_STATUS_SUCCESS
                                                                : CUBLAS_STATUS_NOT_INITIALIZED;
}
PHOS_EXPORT size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }  // cuBLASLt ships with cuBLAS, one version
PHOS_EXPORT size_t cublasLtGetCudartVersion(void) { return CUDART_VERSION; }
PHOS_EXPORT cublasStatus_t cublasLtGetProperty(libraryPropertyType type, int* value) {
  return cublasGetProperty(type, value);
}
PHOS_EXPORT const char* cublasLtGetStatusName(cublasStatus_t status) { return cublasGetStatusName(status); }
PHOS_EXPORT const char* cublasLtGetStatusString(cublasStatus_t status) { return cublasGetStatusString(status); }

// ---------------------------------------------------------------- matrix layouts

PHOS_EXPORT cublasStatus_t cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t layout, size_t size,
                                                             cudaDataType type, uint64_t rows, uint64_t cols,
                                                             int64_t ld) {
  if (layout == nullptr || size < sizeof(LayoutState)) return CUBLAS_STATUS_INVALID_VALUE;
  InitLayout(reinterpret_cast<LayoutState*>(layout), type, rows, cols, ld);
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                                      uint64_t cols, int64_t ld) {
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* l = new cublasLtMatrixLayoutOpaque_t{};
  InitLayout(reinterpret_cast<LayoutState*>(l), type, rows, cols, ld);
  *layout = l;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(const cublasLtMatrixLayout_t layout) {
  auto* l = StateOf<LayoutState>(layout, kLayoutMagic);
  if (l == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  l->magic = 0;
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                            cublasLtMatrixLayoutAttribute_t attr, const void* buf,
                                                            size_t size) {
  auto* l = StateOf<LayoutState>(layout, kLayoutMagic);
  if (l == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  bool ok = true;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: { uint32_t v; ok = Take(buf, size, &v); if (ok) l->type = static_cast<int32_t>(v); break; }
    case CUBLASLT_MATRIX_LAYOUT_ORDER: ok = Take(buf, size, &l->order); break;
    case CUBLASLT_MATRIX_LAYOUT_ROWS: ok = Take(buf, size, &l->rows); break;
    case CUBLASLT_MATRIX_LAYOUT_COLS: ok = Take(buf, size, &l->cols); break;
    case CUBLASLT_MATRIX_LAYOUT_LD: ok = Take(buf, size, &l->ld); break;
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: ok = Take(buf, size, &l->batch); break;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: ok = Take(buf, size, &l->stride); break;
    default:
      if (!IsZero(buf, size) && l->unsupported == 0) l->unsupported = static_cast<int32_t>(attr) + 1;
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
PHOS_EXPORT cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t layout,
                                                            cublasLtMatrixLayoutAttribute_t attr, void* buf,
                                                            size_t size, size_t* written) {
  auto* l = StateOf<LayoutState>(layout, kLayoutMagic);
  if (l == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return Give(static_cast<uint32_t>(l->type), buf, size, written);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return Give(l->order, buf, size, written);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return Give(l->rows, buf, size, written);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return Give(l->cols, buf, size, written);
    case CUBLASLT_MATRIX_LAYOUT_LD: return Give(l->ld, buf, size, written);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return Give(l->batch, buf, size, written);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return Give(l->stride, buf, size, written);
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

// ---------------------------------------------------------------- matmul descriptors

PHOS_EXPORT cublasStatus_t cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t desc, size_t size,
                                                           cublasComputeType_t compute, cudaDataType_t scale) {
  if (desc == nullptr || size < sizeof(DescState)) return CUBLAS_STATUS_INVALID_VALUE;
  InitDesc(reinterpret_cast<DescState*>(desc), compute, scale);
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                                    cudaDataType_t scale) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* d = new cublasLtMatmulDescOpaque_t{};
  InitDesc(reinterpret_cast<DescState*>(d), compute, scale);
  *desc = d;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasLtMatmulDescDestroy(const cublasLtMatmulDesc_t desc) {
  auto* d = StateOf<DescState>(desc, kDescMagic);
  if (d == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  d->magic = 0;
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                          cublasLtMatmulDescAttributes_t attr, const void* buf,
                                                          size_t size) {
  auto* d = StateOf<DescState>(desc, kDescMagic);
  if (d == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  bool ok = true;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: ok = Take(buf, size, &d->compute); break;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: ok = Take(buf, size, &d->scale); break;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: ok = Take(buf, size, &d->pointer_mode); break;
    case CUBLASLT_MATMUL_DESC_TRANSA: ok = Take(buf, size, &d->transa); break;
    case CUBLASLT_MATMUL_DESC_TRANSB: ok = Take(buf, size, &d->transb); break;
    case CUBLASLT_MATMUL_DESC_TRANSC: ok = Take(buf, size, &d->transc); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: ok = Take(buf, size, &d->epilogue); break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: { const void* p = nullptr; ok = Take(buf, size, &p); d->bias = reinterpret_cast<uint64_t>(p); break; }
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: ok = Take(buf, size, &d->bias_stride); break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: ok = Take(buf, size, &d->bias_type); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: { const void* p = nullptr; ok = Take(buf, size, &p); d->aux = reinterpret_cast<uint64_t>(p); break; }
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: ok = Take(buf, size, &d->aux_ld); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: ok = Take(buf, size, &d->aux_stride); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: ok = Take(buf, size, &d->aux_type); break;
    // Hints that change no result.
    case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET:
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM:
    case CUBLASLT_MATMUL_DESC_FILL_MODE: break;
    default:
      if (!IsZero(buf, size) && d->unsupported == 0) d->unsupported = static_cast<int32_t>(attr) + 1;
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
PHOS_EXPORT cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc,
                                                          cublasLtMatmulDescAttributes_t attr, void* buf, size_t size,
                                                          size_t* written) {
  auto* d = StateOf<DescState>(desc, kDescMagic);
  if (d == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return Give(d->compute, buf, size, written);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return Give(d->scale, buf, size, written);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return Give(d->pointer_mode, buf, size, written);
    case CUBLASLT_MATMUL_DESC_TRANSA: return Give(d->transa, buf, size, written);
    case CUBLASLT_MATMUL_DESC_TRANSB: return Give(d->transb, buf, size, written);
    case CUBLASLT_MATMUL_DESC_TRANSC: return Give(d->transc, buf, size, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return Give(d->epilogue, buf, size, written);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return Give(reinterpret_cast<const void*>(d->bias), buf, size, written);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return Give(d->bias_stride, buf, size, written);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return Give(d->bias_type, buf, size, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return Give(reinterpret_cast<const void*>(d->aux), buf, size, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return Give(d->aux_ld, buf, size, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: return Give(d->aux_stride, buf, size, written);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return Give(d->aux_type, buf, size, written);
    default: return CUBLAS_STATUS_INVALID_VALUE;
  }
}

// ---------------------------------------------------------------- preferences, heuristics

PHOS_EXPORT cublasStatus_t cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t pref, size_t size) {
  if (pref == nullptr || size < sizeof(PrefState)) return CUBLAS_STATUS_INVALID_VALUE;
  auto* p = reinterpret_cast<PrefState*>(pref);
  std::memset(p, 0, sizeof *p);
  p->magic = kPrefMagic;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* p = new cublasLtMatmulPreferenceOpaque_t{};
  reinterpret_cast<PrefState*>(p)->magic = kPrefMagic;
  *pref = p;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(const cublasLtMatmulPreference_t pref) {
  auto* p = StateOf<PrefState>(pref, kPrefMagic);
  if (p == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  p->magic = 0;
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}
PHOS_EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                cublasLtMatmulPreferenceAttributes_t attr,
                                                                const void* buf, size_t size) {
  auto* p = StateOf<PrefState>(pref, kPrefMagic);
  if (p == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  // Search mode, workspace limit, alignments: the algorithm phos reports
  // needs no workspace and suits any alignment; the values are kept.
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    return Take(buf, size, &p->max_workspace) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
  }
  if (attr == CUBLASLT_MATMUL_PREF_SEARCH_MODE) {
    return Take(buf, size, &p->search_mode) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
  }
  return buf != nullptr ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}
PHOS_EXPORT cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                                cublasLtMatmulPreferenceAttributes_t attr, void* buf,
                                                                size_t size, size_t* written) {
  auto* p = StateOf<PrefState>(pref, kPrefMagic);
  if (p == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) return Give(p->max_workspace, buf, size, written);
  if (attr == CUBLASLT_MATMUL_PREF_SEARCH_MODE) return Give(p->search_mode, buf, size, written);
  return CUBLAS_STATUS_INVALID_VALUE;
}

PHOS_EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                          cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                          cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                                          cublasLtMatmulPreference_t pref, int requested,
                                                          cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (!LiveHandle(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (StateOf<DescState>(desc, kDescMagic) == nullptr || StateOf<LayoutState>(a, kLayoutMagic) == nullptr ||
      StateOf<LayoutState>(b, kLayoutMagic) == nullptr || StateOf<LayoutState>(c, kLayoutMagic) == nullptr ||
      StateOf<LayoutState>(d, kLayoutMagic) == nullptr || StateOf<PrefState>(pref, kPrefMagic) == nullptr ||
      requested <= 0 || results == nullptr || returned == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // One algorithm: phosd's (the cuda backend lets cuBLASLt choose; the sim
  // has one). It needs no workspace.
  std::memset(&results[0], 0, sizeof results[0]);
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

// ---------------------------------------------------------------- matmul

PHOS_EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                          const void* A, cublasLtMatrixLayout_t adesc, const void* B,
                                          cublasLtMatrixLayout_t bdesc, const void* beta, const void* C,
                                          cublasLtMatrixLayout_t cdesc, void* D, cublasLtMatrixLayout_t ddesc,
                                          const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                          cudaStream_t stream) {
  (void)algo;
  (void)workspace;
  (void)workspace_bytes;
  if (!LiveHandle(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  const DescState* md = StateOf<DescState>(desc, kDescMagic);
  const LayoutState* la = StateOf<LayoutState>(adesc, kLayoutMagic);
  const LayoutState* lb = StateOf<LayoutState>(bdesc, kLayoutMagic);
  const LayoutState* lc = StateOf<LayoutState>(cdesc, kLayoutMagic);
  const LayoutState* ld = StateOf<LayoutState>(ddesc, kLayoutMagic);
  if (md == nullptr || la == nullptr || lb == nullptr || lc == nullptr || ld == nullptr || alpha == nullptr ||
      beta == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  auto refuse = [](const std::string& what) {
    SayOnce("cublasLtMatmul: " + what + " is not supported by phos yet");
    return CUBLAS_STATUS_NOT_SUPPORTED;
  };
  if (md->unsupported != 0) return refuse("matmul descriptor attribute " + std::to_string(md->unsupported - 1));
  for (const LayoutState* l : {la, lb, lc, ld}) {
    if (l->unsupported != 0) return refuse("matrix layout attribute " + std::to_string(l->unsupported - 1));
    if (l->order != CUBLASLT_ORDER_COL) return refuse("a matrix order other than column-major");
  }
  if (md->pointer_mode != CUBLASLT_POINTER_MODE_HOST && md->pointer_mode != CUBLASLT_POINTER_MODE_DEVICE) {
    return refuse("pointer mode " + std::to_string(md->pointer_mode));
  }
  if (md->transc != CUBLAS_OP_N) return refuse("a transposed C");
  if (!phos::wire::LtEpilogueSupported(md->epilogue)) return refuse("epilogue " + std::to_string(md->epilogue));
  // m x n from D; op(A) m x k, op(B) k x n; C as D; one batch count.
  const int64_t m = static_cast<int64_t>(ld->rows), n = static_cast<int64_t>(ld->cols);
  const bool ta = md->transa != CUBLAS_OP_N, tb = md->transb != CUBLAS_OP_N;
  const int64_t k = static_cast<int64_t>(ta ? la->rows : la->cols);
  if (static_cast<int64_t>(ta ? la->cols : la->rows) != m || static_cast<int64_t>(tb ? lb->cols : lb->rows) != k ||
      static_cast<int64_t>(tb ? lb->rows : lb->cols) != n || lc->rows != ld->rows || lc->cols != ld->cols ||
      la->batch != ld->batch || lb->batch != ld->batch || lc->batch != ld->batch || ld->batch < 1) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  phos::wire::BlasLtRequest r{};
  phos::wire::BlasRequest& g = r.gemm;
  g.type_a = la->type;
  g.type_b = lb->type;
  g.type_c = lc->type;
  g.compute = md->compute;
  g.scalar_type = md->scale;
  g.op_a = static_cast<uint32_t>(md->transa);
  g.op_b = static_cast<uint32_t>(md->transb);
  g.m = m;
  g.n = n;
  g.k = k;
  g.batch = ld->batch;
  g.a = reinterpret_cast<uint64_t>(A);
  g.b = reinterpret_cast<uint64_t>(B);
  g.c = reinterpret_cast<uint64_t>(C);
  g.lda = la->ld;
  g.ldb = lb->ld;
  g.ldc = lc->ld;
  g.stride_a = la->stride;
  g.stride_b = lb->stride;
  g.stride_c = lc->stride;
  const uint32_t es = phos::wire::BlasTypeBytes(g.scalar_type);
  if (es == 0) return refuse("scale type " + std::to_string(g.scalar_type));
  if (md->pointer_mode == CUBLASLT_POINTER_MODE_DEVICE) {
    g.flags |= phos::wire::kBlasDeviceScalars;
    g.alpha_ptr = reinterpret_cast<uint64_t>(alpha);
    g.beta_ptr = reinterpret_cast<uint64_t>(beta);
  } else {
    std::memcpy(g.alpha, alpha, es);
    std::memcpy(g.beta, beta, es);
  }
  r.d = reinterpret_cast<uint64_t>(D);
  r.ldd = ld->ld;
  r.stride_d = ld->stride;
  r.type_d = ld->type;
  r.epilogue = md->epilogue;
  r.bias = md->bias;
  r.bias_type = md->bias_type >= 0 ? md->bias_type : ld->type;
  r.bias_stride = md->bias_stride;
  phos::wire::LtEpilogue ep;
  phos::wire::DecodeLtEpilogue(md->epilogue, &ep);
  if (ep.aux_in || ep.aux_out) {
    r.aux = md->aux;
    r.aux_ld = md->aux_ld;
    r.aux_stride = md->aux_stride;
    // ReLU's aux is a bit mask (no element type); GELU's defaults to D's.
    r.aux_type = ep.relu_mask() ? -1 : md->aux_type >= 0 ? md->aux_type : ld->type;
  }
  phos::wire::BlasOperands ops;
  if (const char* why = phos::wire::CheckBlasLt(r, &ops); why != nullptr) {
    if (std::getenv("PHOS_TRACE_ERRORS") != nullptr) std::fprintf(stderr, "phos: cublasLtMatmul: %s\n", why);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (cublasStatus_t ps = ProbeBlasOnce(phos::wire::op::kBlasLtMatmul, r); ps != CUBLAS_STATUS_SUCCESS) return ps;
  const auto* p = reinterpret_cast<const std::byte*>(&r);
  return PostBlas(phos::wire::op::kBlasLtMatmul, StreamIdOf(stream), std::vector<std::byte>(p, p + sizeof r));
}
