// cuBLASLt's training epilogues through phos (docs/interposer.md "cuBLAS
// and cuBLASLt"): one dense layer's forward and backward pass as fused-MLP
// code (TransformerEngine, apex's fused_dense) runs them — forward with
// bias + ReLU or GELU saving the activation's aux matrix, backward with
// DRELU/DGELU reading it back and the bias gradient in the same call, and
// the bias gradients of an input (BGRADA, BGRADB) — each against a
// double-precision CPU reference. Then the same through a cuBLAS handle
// passed as the cuBLASLt handle, as PyTorch does on CUDA
// (at::cuda::getCurrentCUDABlasLtHandle casts getCurrentCUDABlasHandle).
// Prints "cublaslt_training: OK" at the end; a failed check prints its line.
#define PHOS_PROGRAM_NAME "cublaslt_training"

#include <cublasLt.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "cublas_checks.h"
#include "program_checks.h"

namespace {

double Gelu(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
double GeluGrad(double x) {
  const double s = 0.7978845608028654, t = std::tanh(s * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

// One float problem D = epilogue(alpha op(A) B), A stored m x k (or k x m
// when transposed), B k x n, `batch` members packed one after another.
struct Problem {
  int m = 24, n = 10, k = 16, batch = 2;
  int ta = 0;
  std::vector<float> a, b;
  float *da = nullptr, *db = nullptr, *dd = nullptr;
  long long sa() const { return static_cast<long long>(m) * k; }
  long long sb() const { return static_cast<long long>(k) * n; }
  long long sd() const { return static_cast<long long>(m) * n; }
  // The product alpha op(A) B, reference, per member.
  std::vector<std::complex<double>> Product(double alpha) const {
    std::vector<float> zero(static_cast<size_t>(sd() * batch), 0.0f);
    return RefGemm(ta, 0, m, n, k, alpha, a, ta ? k : m, b, k, 0.0, zero, m, batch, sa(), sb(), sd());
  }
};

Problem MakeProblem(int ta) {
  Problem p;
  p.ta = ta;
  p.a = RandomMatrix<float>(static_cast<size_t>(p.sa() * p.batch));
  p.b = RandomMatrix<float>(static_cast<size_t>(p.sb() * p.batch));
  p.da = Device(p.a);
  p.db = Device(p.b);
  cudaMalloc(&p.dd, sizeof(float) * p.sd() * p.batch);
  return p;
}

void FreeProblem(Problem* p) {
  cudaFree(p->da);
  cudaFree(p->db);
  cudaFree(p->dd);
}

// The epilogue's attributes; aux_type -1 leaves it at its default.
struct Epilogue {
  cublasLtEpilogue_t kind = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;
  long long bias_stride = 0;
  void* aux = nullptr;
  long long aux_ld = 0, aux_stride = 0;
  int32_t aux_type = -1;
};

cublasStatus_t Run(cublasLtHandle_t lt, const Problem& p, const Epilogue& e, float alpha = 1.0f) {
  cublasLtMatmulDesc_t desc;
  cublasStatus_t s = cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  const cublasOperation_t ta = p.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e.kind, sizeof e.kind);
  if (e.bias != nullptr) {
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &e.bias, sizeof e.bias);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &e.bias_stride, sizeof e.bias_stride);
  }
  if (e.aux != nullptr) {
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e.aux, sizeof e.aux);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &e.aux_ld, sizeof e.aux_ld);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, &e.aux_stride,
                                   sizeof e.aux_stride);
    if (e.aux_type >= 0)
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &e.aux_type, sizeof e.aux_type);
  }
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, p.ta ? p.k : p.m, p.ta ? p.m : p.k, p.ta ? p.k : p.m);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, p.k, p.n, p.k);
  cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, p.m, p.n, p.m);
  const long long strides[] = {p.sa(), p.sb(), p.sd()};
  const cublasLtMatrixLayout_t layouts[] = {la, lb, ld};
  for (int i = 0; i < 3; ++i) {
    cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &p.batch, sizeof p.batch);
    cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i],
                                     sizeof strides[i]);
  }
  const float beta = 0.0f;
  s = cublasLtMatmul(lt, desc, &alpha, p.da, la, p.db, lb, &beta, p.dd, ld, p.dd, ld, nullptr, nullptr, 0, nullptr);
  for (cublasLtMatrixLayout_t l : layouts) cublasLtMatrixLayoutDestroy(l);
  cublasLtMatmulDescDestroy(desc);
  return s;
}

bool Bit(const std::vector<uint8_t>& mask, long long bit) { return (mask[bit / 8] >> (bit % 8)) & 1; }

// Forward: D = relu(A B + bias), the mask saved; backward: D' = (A' B') where
// the mask is set, and the bias gradient = D' summed over each row.
int Relu(cublasLtHandle_t lt) {
  Problem f = MakeProblem(0), g = MakeProblem(1);
  auto bias = RandomMatrix<float>(static_cast<size_t>(f.m * f.batch));
  float* dbias = Device(bias);
  const long long mask_ld = 128, mask_stride = mask_ld * f.n;  // bits
  uint8_t* dmask = nullptr;
  CHECK(cudaMalloc(&dmask, mask_stride * f.batch / 8));
  CHECK(cudaMemset(dmask, 0, mask_stride * f.batch / 8));
  Epilogue fwd{CUBLASLT_EPILOGUE_RELU_AUX_BIAS, dbias, f.m, dmask, mask_ld, mask_stride};
  BCHECK(Run(lt, f, fwd));
  auto d = Host(f.dd, static_cast<size_t>(f.sd() * f.batch));
  auto mask = Host(dmask, static_cast<size_t>(mask_stride * f.batch / 8));
  auto x = f.Product(1.0);
  int positive = 0;
  for (int p = 0; p < f.batch; ++p)
    for (int j = 0; j < f.n; ++j)
      for (int i = 0; i < f.m; ++i) {
        const double v = x[p * f.sd() + i + j * f.m].real() + bias[p * f.m + i];
        NEAR(d[p * f.sd() + i + j * f.m], std::max(0.0, v), 1e-5);
        if (std::fabs(v) > 1e-4) EXPECT(Bit(mask, p * mask_stride + j * mask_ld + i) == (v > 0));
        positive += v > 0;
      }
  EXPECT(positive > 0 && positive < f.m * f.n * f.batch);
  // Backward with the saved mask, and the bias gradient.
  float* dgrad = nullptr;
  CHECK(cudaMalloc(&dgrad, sizeof(float) * g.m * g.batch));
  Epilogue bwd{CUBLASLT_EPILOGUE_DRELU_BGRAD, dgrad, g.m, dmask, mask_ld, mask_stride};
  BCHECK(Run(lt, g, bwd, 0.5f));
  auto dg = Host(g.dd, static_cast<size_t>(g.sd() * g.batch));
  auto grad = Host(dgrad, static_cast<size_t>(g.m * g.batch));
  auto y = g.Product(0.5);
  for (int p = 0; p < g.batch; ++p)
    for (int i = 0; i < g.m; ++i) {
      double row = 0;
      for (int j = 0; j < g.n; ++j) {
        const double want = Bit(mask, p * mask_stride + j * mask_ld + i) ? y[p * g.sd() + i + j * g.m].real() : 0.0;
        NEAR(dg[p * g.sd() + i + j * g.m], want, 1e-5);
        row += want;
      }
      NEAR(grad[p * g.m + i], row, 1e-5);
    }
  // Without the gradient: DRELU alone.
  Epilogue drelu{CUBLASLT_EPILOGUE_DRELU, nullptr, 0, dmask, mask_ld, mask_stride};
  BCHECK(Run(lt, g, drelu, 0.5f));
  EXPECT(Host(g.dd, dg.size()) == dg);
  // cuBLASLt's rules: a mask's ld is a multiple of 128 bits; an aux
  // epilogue needs its aux pointer. Refused at once, nothing enqueued.
  Epilogue bad_ld = fwd;
  bad_ld.aux_ld = 64;
  BEXPECT(Run(lt, f, bad_ld), CUBLAS_STATUS_INVALID_VALUE);
  Epilogue no_aux = fwd;
  no_aux.aux = nullptr;
  BEXPECT(Run(lt, f, no_aux), CUBLAS_STATUS_INVALID_VALUE);
  cudaFree(dbias);
  cudaFree(dmask);
  cudaFree(dgrad);
  FreeProblem(&f);
  FreeProblem(&g);
  std::printf("cublaslt_training: RELU_AUX_BIAS, DRELU_BGRAD, DRELU OK\n");
  return 0;
}

// Forward: D = gelu(A B + bias) with the GELU input saved (float, ld 32 of
// which 24 rows used); backward: D' = (A' B') * gelu'(input), bias gradient.
int GeluLayer(cublasLtHandle_t lt) {
  Problem f = MakeProblem(1), g = MakeProblem(0);
  auto bias = RandomMatrix<float>(static_cast<size_t>(f.m * f.batch));
  float* dbias = Device(bias);
  const long long aux_ld = 32, aux_stride = aux_ld * f.n;
  float* daux = nullptr;
  CHECK(cudaMalloc(&daux, sizeof(float) * aux_stride * f.batch));
  Epilogue fwd{CUBLASLT_EPILOGUE_GELU_AUX_BIAS, dbias, f.m, daux, aux_ld, aux_stride};
  BCHECK(Run(lt, f, fwd));
  auto d = Host(f.dd, static_cast<size_t>(f.sd() * f.batch));
  auto aux = Host(daux, static_cast<size_t>(aux_stride * f.batch));
  auto x = f.Product(1.0);
  for (int p = 0; p < f.batch; ++p)
    for (int j = 0; j < f.n; ++j)
      for (int i = 0; i < f.m; ++i) {
        const double v = x[p * f.sd() + i + j * f.m].real() + bias[p * f.m + i];
        NEAR(aux[p * aux_stride + j * aux_ld + i], v, 1e-5);
        NEAR(d[p * f.sd() + i + j * f.m], Gelu(v), 1e-5);
      }
  float* dgrad = nullptr;
  CHECK(cudaMalloc(&dgrad, sizeof(float) * g.m * g.batch));
  Epilogue bwd{CUBLASLT_EPILOGUE_DGELU_BGRAD, dgrad, g.m, daux, aux_ld, aux_stride, CUDA_R_32F};
  BCHECK(Run(lt, g, bwd));
  auto dg = Host(g.dd, static_cast<size_t>(g.sd() * g.batch));
  auto grad = Host(dgrad, static_cast<size_t>(g.m * g.batch));
  auto y = g.Product(1.0);
  for (int p = 0; p < g.batch; ++p)
    for (int i = 0; i < g.m; ++i) {
      double row = 0;
      for (int j = 0; j < g.n; ++j) {
        const double want = y[p * g.sd() + i + j * g.m].real() * GeluGrad(aux[p * aux_stride + j * aux_ld + i]);
        NEAR(dg[p * g.sd() + i + j * g.m], want, 1e-5);
        row += want;
      }
      NEAR(grad[p * g.m + i], row, 1e-5);
    }
  Epilogue bad_ld = fwd;
  bad_ld.aux_ld = 28;  // a GELU aux ld is a multiple of 8
  BEXPECT(Run(lt, f, bad_ld), CUBLAS_STATUS_INVALID_VALUE);
  cudaFree(dbias);
  cudaFree(daux);
  cudaFree(dgrad);
  FreeProblem(&f);
  FreeProblem(&g);
  std::printf("cublaslt_training: GELU_AUX_BIAS, DGELU_BGRAD OK\n");
  return 0;
}

// A weight gradient's bias gradient: BGRADA sums op(A)'s rows over k (m
// values), BGRADB op(B)'s columns (n values); D is the plain product.
int BiasGradients(cublasLtHandle_t lt) {
  Problem p = MakeProblem(1);
  float* dgrad = nullptr;
  CHECK(cudaMalloc(&dgrad, sizeof(float) * (p.m + p.n) * p.batch));
  auto x = p.Product(1.0);
  for (const bool from_a : {true, false}) {
    const int len = from_a ? p.m : p.n;
    Epilogue e{from_a ? CUBLASLT_EPILOGUE_BGRADA : CUBLASLT_EPILOGUE_BGRADB, dgrad, len};
    BCHECK(Run(lt, p, e));
    auto d = Host(p.dd, static_cast<size_t>(p.sd() * p.batch));
    for (size_t i = 0; i < d.size(); ++i) NEAR(d[i], x[i].real(), 1e-5);
    auto grad = Host(dgrad, static_cast<size_t>(len * p.batch));
    for (int q = 0; q < p.batch; ++q)
      for (int i = 0; i < len; ++i) {
        double sum = 0;
        for (int l = 0; l < p.k; ++l)
          sum += from_a ? Get(p.a, p.k, 1, i, l, q * p.sa()).real() : Get(p.b, p.k, 0, l, i, q * p.sb()).real();
        NEAR(grad[q * len + i], sum, 1e-5);
      }
  }
  // Whether cuBLASLt scales an input's bias gradient by alpha is not
  // documented: the sim refuses alpha != 1 by name; a GPU's cuBLASLt runs it.
  Epilogue e{CUBLASLT_EPILOGUE_BGRADB, dgrad, p.n};
  const cublasStatus_t scaled = Run(lt, p, e, 2.0f);
  std::printf("cublaslt_training: BGRADB with alpha 2: %s\n", cublasGetStatusName(scaled));
  EXPECT(scaled == CUBLAS_STATUS_SUCCESS || scaled == CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(cudaDeviceSynchronize());  // a refused call left no deferred error
  cudaFree(dgrad);
  FreeProblem(&p);
  std::printf("cublaslt_training: BGRADA, BGRADB OK\n");
  return 0;
}

}  // namespace

int main() {
  cublasLtHandle_t lt;
  BCHECK(cublasLtCreate(&lt));
  if (int r = Relu(lt)) return r;
  if (int r = GeluLayer(lt)) return r;
  if (int r = BiasGradients(lt)) return r;
  CHECK(cudaDeviceSynchronize());
  BCHECK(cublasLtDestroy(lt));
  // PyTorch's idiom: the cuBLAS handle is the cuBLASLt handle (the real
  // libraries accept it; seen on an H200, docs/gpu-report.md).
  cublasHandle_t blas;
  BCHECK(cublasCreate(&blas));
  if (int r = Relu(reinterpret_cast<cublasLtHandle_t>(blas))) return r;
  CHECK(cudaDeviceSynchronize());
  BCHECK(cublasDestroy(blas));
  std::printf("cublaslt_training: a cuBLAS handle as the cuBLASLt handle OK\n");
  std::printf("cublaslt_training: OK\n");
  return 0;
}
