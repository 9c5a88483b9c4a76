// pipeprop/kernels/shifted_gemm.hpp: the GEMM of a direct ("implicit GEMM") convolution: C = A B where row p of B
// is not stored as a matrix row but read from a base pointer at a per-row offset, B[p, j] = b[b_offsets[p] + j].
//
// For a stride-1 "same" convolution over an input padded with zeros (layers/conv2d_direct.hpp), the column matrix
// of im2col (Chellapilla, Puri & Simard 2006, §2-3) has, in a padded-width pixel layout, row (c, kh, kw) equal to the
// padded input shifted by c * channel stride + kh * padded width + kw: the GEMM reads those rows in place, and the
// 9x larger column matrix (3x3) is never written. Register blocks as kernels::simd_gemm's op(A) B
// (simd_gemm_blocks.hpp: 8 x 2 vectors of C with AVX-512, 6 x 2 with AVX2, then one-vector blocks). Every element
// of C is the same arithmetic whatever block computes it: a chain of fused multiply-adds over p from 0 to K - 1
// (kernels::fma), stored unrounded further (alpha = 1, beta = 0). Raw pointers, row-major A and C, no allocation, no
// exceptions.
#pragma once

#include <xsimd/xsimd.hpp>

#include "pipeprop/kernels/fma.hpp"
#include "pipeprop/kernels/register_kernel.hpp"
#include "pipeprop/kernels/unroll.hpp"
#include "pipeprop/kernels/simd_gemm_blocks.hpp"

#include <array>
#include <cstddef>

namespace pipeprop::kernels {

namespace detail {

/// C block [MR x NV W] of C = A B, A[r, p] = a[r lda + p] (IndexedA false: row-major) or a[r lda + a_offsets[p]]
/// (IndexedA true), B[p, j] = b[b_offsets[p] + j] (NV W readable values from every b + b_offsets[p] + j0), C
/// row-major (stride ldc), assigned. K >= 1. Never inlined, for the reason given at simd_block_nn (the accumulators
/// stay in registers) nor cloned.
template <class T, std::size_t MR, std::size_t NV, bool IndexedA>
PIPEPROP_REGISTER_KERNEL
inline void simd_block_shifted(std::size_t k, const T* __restrict a, std::size_t lda,
                               const std::ptrdiff_t* __restrict a_offsets, const T* __restrict b,
                               const std::ptrdiff_t* __restrict b_offsets, T* __restrict c,
                               std::size_t ldc) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    std::array<std::array<batch, NV>, MR> acc;
    PIPEPROP_UNROLL
    for (std::size_t r = 0; r < MR; ++r)
        PIPEPROP_UNROLL
        for (std::size_t v = 0; v < NV; ++v) acc[r][v] = batch(T(0));
    for (std::size_t p = 0; p < k; ++p) {
        const T* bp = b + b_offsets[p];
        std::array<batch, NV> bv;
        PIPEPROP_UNROLL
        for (std::size_t v = 0; v < NV; ++v) bv[v] = batch::load_unaligned(bp + v * w);
        const T* ap = a;
        if constexpr (IndexedA) ap += a_offsets[p];
        else ap += p;
        PIPEPROP_UNROLL
        for (std::size_t r = 0; r < MR; ++r) {
            const batch ar(ap[r * lda]);
            PIPEPROP_UNROLL
            for (std::size_t v = 0; v < NV; ++v) acc[r][v] = kernels::fma(ar, bv[v], acc[r][v]);
        }
    }
    PIPEPROP_UNROLL
    for (std::size_t r = 0; r < MR; ++r)
        PIPEPROP_UNROLL
        for (std::size_t v = 0; v < NV; ++v) acc[r][v].store_unaligned(c + r * ldc + v * w);
}

/// C block [MR x NV W] of C = A B (Accumulate: C += A B) where row r of A is read at a + a_offsets[r], B [K x N]
/// row-major (stride ldb), C row-major (stride ldc): per p, NV vector loads of B, MR broadcasts of A, MR NV fused
/// multiply-adds in order of p; the sum is stored (or added to C with one rounding). Never inlined, as above.
template <class T, std::size_t MR, std::size_t NV, bool Accumulate>
PIPEPROP_REGISTER_KERNEL
inline void simd_block_shifted_rows(std::size_t k, const T* __restrict a,
                                    const std::ptrdiff_t* __restrict a_offsets,
                                    const T* __restrict b, std::size_t ldb, T* __restrict c,
                                    std::size_t ldc) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    std::array<const T*, MR> rows;
    PIPEPROP_UNROLL
    for (std::size_t r = 0; r < MR; ++r) rows[r] = a + a_offsets[r];
    std::array<std::array<batch, NV>, MR> acc;
    PIPEPROP_UNROLL
    for (std::size_t r = 0; r < MR; ++r)
        PIPEPROP_UNROLL
        for (std::size_t v = 0; v < NV; ++v) acc[r][v] = batch(T(0));
    for (std::size_t p = 0; p < k; ++p) {
        std::array<batch, NV> bv;
        PIPEPROP_UNROLL
        for (std::size_t v = 0; v < NV; ++v) bv[v] = batch::load_unaligned(b + p * ldb + v * w);
        PIPEPROP_UNROLL
        for (std::size_t r = 0; r < MR; ++r) {
            const batch ar(rows[r][p]);
            PIPEPROP_UNROLL
            for (std::size_t v = 0; v < NV; ++v) acc[r][v] = kernels::fma(ar, bv[v], acc[r][v]);
        }
    }
    PIPEPROP_UNROLL
    for (std::size_t r = 0; r < MR; ++r)
        PIPEPROP_UNROLL
        for (std::size_t v = 0; v < NV; ++v) {
            T* cv = c + r * ldc + v * w;
            if constexpr (Accumulate) (acc[r][v] + batch::load_unaligned(cv)).store_unaligned(cv);
            else acc[r][v].store_unaligned(cv);
        }
}

/// The column and row blocks of shifted_gemm and shifted_gemm_indexed_a (A indexed as simd_block_shifted).
template <bool IndexedA, class T>
void shifted_gemm_blocks(std::size_t m, std::size_t n, std::size_t k, const T* a, std::size_t lda,
                         const std::ptrdiff_t* a_offsets, const T* b, const std::ptrdiff_t* b_offsets, T* c,
                         std::size_t ldc) noexcept {
    constexpr std::size_t w = xsimd::batch<T>::size;
    std::size_t j = 0;
    for (; j + 2 * w <= n; j += 2 * w)
        for_row_blocks<simd_rows_2v<T>>(m, [&]<std::size_t MR>(std::size_t i) {
            simd_block_shifted<T, MR, 2, IndexedA>(k, a + i * lda, lda, a_offsets, b + j, b_offsets, c + i * ldc + j,
                                                   ldc);
        });
    if (j < n)
        for_row_blocks<simd_rows_1v<T>>(m, [&]<std::size_t MR>(std::size_t i) {
            simd_block_shifted<T, MR, 1, IndexedA>(k, a + i * lda, lda, a_offsets, b + j, b_offsets, c + i * ldc + j,
                                                   ldc);
        });
}

}  // namespace detail

/// C [M x N] = A [M x K] B with B[p, j] = b[b_offsets[p] + j] (see the file comment): C assigned, row-major with
/// stride ldc. N must be a multiple of the SIMD width W of T (xsimd::batch<T>::size); b + b_offsets[p] + j must be
/// readable for every p < K and j < N. K >= 1. Column blocks of 2 W over rows in blocks of simd_rows_2v, an odd last
/// vector in blocks of simd_rows_1v. Throws nothing, allocates nothing.
template <class T>
void shifted_gemm(std::size_t m, std::size_t n, std::size_t k, const T* a, std::size_t lda, const T* b,
                  const std::ptrdiff_t* b_offsets, T* c, std::size_t ldc) noexcept {
    detail::shifted_gemm_blocks<false>(m, n, k, a, lda, nullptr, b, b_offsets, c, ldc);
}

/// shifted_gemm with A's columns read at per-column offsets too: A[r, p] = a[r lda + a_offsets[p]] (a weight tensor
/// read in another index order without copying it: a direct convolution's backward-p1, layers/conv2d_direct.hpp).
/// a + r lda + a_offsets[p] readable for every r < M and p < K; otherwise as shifted_gemm, and the same arithmetic
/// as shifted_gemm on the matrix A these offsets describe.
template <class T>
void shifted_gemm_indexed_a(std::size_t m, std::size_t n, std::size_t k, const T* a, std::size_t lda,
                            const std::ptrdiff_t* a_offsets, const T* b, const std::ptrdiff_t* b_offsets, T* c,
                            std::size_t ldc) noexcept {
    detail::shifted_gemm_blocks<true>(m, n, k, a, lda, a_offsets, b, b_offsets, c, ldc);
}

/// C [M x N] = A [M x K] B, or C += A B (Accumulate), with A[r, p] = a[a_offsets[r] + p] (the rows of A read in place
/// at per-row offsets: a direct convolution's weight gradient, layers/conv2d_direct.hpp) and B [K x N] row-major
/// (stride ldb). N must be a multiple of the SIMD width W of T; a + a_offsets[r] + p readable for every r < M and
/// p < K. Column blocks of 2 W over rows in blocks of simd_rows_2v, an odd last vector in blocks of simd_rows_1v.
/// Every element is a chain of fused multiply-adds over p from 0 to K - 1, then stored (or added to C, one
/// rounding), whatever block computes it. Throws nothing, allocates nothing.
template <bool Accumulate, class T>
void shifted_rows_gemm(std::size_t m, std::size_t n, std::size_t k, const T* a, const std::ptrdiff_t* a_offsets,
                       const T* b, std::size_t ldb, T* c, std::size_t ldc) noexcept {
    constexpr std::size_t w = xsimd::batch<T>::size;
    std::size_t j = 0;
    for (; j + 2 * w <= n; j += 2 * w)
        detail::for_row_blocks<detail::simd_rows_2v<T>>(m, [&]<std::size_t MR>(std::size_t i) {
            detail::simd_block_shifted_rows<T, MR, 2, Accumulate>(k, a, a_offsets + i, b + j, ldb, c + i * ldc + j,
                                                                 ldc);
        });
    if (j < n)
        detail::for_row_blocks<detail::simd_rows_1v<T>>(m, [&]<std::size_t MR>(std::size_t i) {
            detail::simd_block_shifted_rows<T, MR, 1, Accumulate>(k, a, a_offsets + i, b + j, ldb, c + i * ldc + j,
                                                                 ldc);
        });
}

}  // namespace pipeprop::kernels
