// pipeprop/kernels/gemm.hpp: row-major GEMM through CBLAS (OpenBLAS on Debian).
//
// The measurement that chose BLAS over an xsimd kernel is recorded in bench/README.md (gemm section).
#pragma once

#include <cblas.h>

#include <cstddef>

namespace pipeprop::kernels {

/// C[M x N] = alpha * op(A) * op(B) + beta * C, all row-major. op(A) is [M x K], op(B) is [K x N].
/// lda/ldb/ldc are the row strides (elements) of A, B, C as stored. Throws nothing.
inline void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                 const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                 std::size_t ldc) noexcept {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

/// Double-precision overload (used by the finite-difference gradient checks).
inline void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, double alpha,
                 const double* a, std::size_t lda, const double* b, std::size_t ldb, double beta, double* c,
                 std::size_t ldc) noexcept {
    cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

}  // namespace pipeprop::kernels
