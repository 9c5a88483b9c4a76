// pipeprop/kernels/gemm.hpp: the row-major GEMM every layer calls: pipeprop's xsimd kernel (simd_gemm.hpp) or CBLAS
// (OpenBLAS on Debian), whichever measured faster for the shape and the compiled SIMD architecture.
//
// The rule: with FMA and vectors of 256 bits or more (AVX2 + FMA3, AVX-512) the xsimd kernel is used for every
// product of at most simd_gemm_max_multiply_adds multiply-adds; otherwise, and always without FMA (e.g. a generic
// x86-64 build), CBLAS with its runtime-dispatched kernels. The rule does not look at OpenBLAS's core type. The
// measurements it rests on (bench/gemm_choice.cpp, bench/layers_bench.cpp) are in bench/README.md, "GEMM: BLAS or
// xsimd" and "Kernels at b = 1 on AVX2 and AVX-512".
#pragma once

#include <cblas.h>
#include <xsimd/xsimd.hpp>

#include <concepts>
#include <cstddef>

#include "pipeprop/kernels/simd_gemm.hpp"

namespace pipeprop::kernels {

/// True when this translation unit's SIMD architecture has FMA and vectors of at least 256 bits, the condition
/// under which simd_gemm measured faster than BLAS (bench/README.md).
inline constexpr bool simd_gemm_preferred = XSIMD_WITH_FMA3_AVX2 || XSIMD_WITH_AVX512F;
/// Largest M N K for which simd_gemm is used (it has no cache blocking beyond its K panels; measured faster than
/// BLAS up to 512^3 = 2^27).
inline constexpr std::size_t simd_gemm_max_multiply_adds = std::size_t(1) << 27;

/// Whether gemm uses simd_gemm (true) or CBLAS (false) for an M x N x K product.
[[nodiscard]] constexpr bool use_simd_gemm(std::size_t m, std::size_t n, std::size_t k) noexcept {
    return simd_gemm_preferred && m * n * k <= simd_gemm_max_multiply_adds;
}

/// C[M x N] = alpha * op(A) * op(B) + beta * C, all row-major. op(A) is [M x K], op(B) is [K x N].
/// lda/ldb/ldc are the row strides (elements) of A, B, C as stored. With beta == 0, C is not read. Throws nothing,
/// allocates nothing.
inline void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                 const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                 std::size_t ldc) noexcept {
    if (use_simd_gemm(m, n, k)) return simd_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

/// Double-precision overload (used by the finite-difference gradient checks, which so check the same kernel the
/// float layers run). A template, so that only a unit that calls it compiles the double kernels.
template <class T>
    requires std::same_as<T, double>
inline void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha,
                 const T* a, std::size_t lda, const T* b, std::size_t ldb, T beta, T* c,
                 std::size_t ldc) noexcept {
    if (use_simd_gemm(m, n, k)) return simd_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

/// CBLAS only, whatever the shape (the baseline of bench/gemm_choice.cpp and bench/layers_bench.cpp).
inline void blas_gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, float alpha,
                      const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
                      std::size_t ldc) noexcept {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
                static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

}  // namespace pipeprop::kernels
