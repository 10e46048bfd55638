/* dnnl_sgemm_shim: an LD_PRELOAD library that answers the Fortran BLAS `sgemm_` with
 * oneDNN's `dnnl_sgemm`, so PyTorch's f32 matrix products run on the same GEMM library
 * as mpc.
 *
 * Why: Debian's python3-torch 1.13 is built with BLAS_INFO=generic and calls whatever
 * libblas.so.3 the system's alternatives select. Without OpenBLAS installed that is the
 * netlib reference BLAS (single-threaded, ~5 GFLOP/s here), which makes PyTorch a
 * meaningless baseline. tools/bench/bench.py reports PyTorch both ways ("system BLAS"
 * and "oneDNN sgemm") and labels which one each row used.
 *
 * Only sgemm_ is replaced (f32 GEMM, what nn.Linear's forward and backward call); every
 * other BLAS routine still comes from the system library. Should oneDNN reject a call,
 * the shim falls back to the next `sgemm_` in the lookup order (the system BLAS).
 *
 * Built by bench.py: gcc -O2 -shared -fPIC dnnl_sgemm_shim.c -ldnnl -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

#include "dnnl.h"

typedef void (*sgemm_fn)(const char*, const char*, const int*, const int*, const int*, const float*,
                         const float*, const int*, const float*, const int*, const float*, float*,
                         const int*);

static char Upper(char c) { return (c >= 'a' && c <= 'z') ? (char)(c - 'a' + 'A') : c; }

/* Column-major C = alpha op(A) op(B) + beta C is, read row-major, C^T = op(B)^T op(A)^T:
 * dnnl_sgemm (row-major) with the operands swapped and M and N exchanged. */
void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
            const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
            const float* beta, float* c, const int* ldc) {
  const char ta = Upper(*transa) == 'N' ? 'N' : 'T';
  const char tb = Upper(*transb) == 'N' ? 'N' : 'T';
  if (*m > 0 && *n > 0 && *k > 0) {
    dnnl_status_t st = dnnl_sgemm(tb, ta, *n, *m, *k, *alpha, b, *ldb, a, *lda, *beta, c, *ldc);
    if (st == dnnl_success) return;
  }
  static sgemm_fn next = NULL;
  if (!next) next = (sgemm_fn)dlsym(RTLD_NEXT, "sgemm_");
  if (next) next(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
