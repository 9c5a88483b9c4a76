// pipeprop/kernels/simd_gemm.hpp: a straightforward register-blocked GEMM written once over xsimd::batch (no
// threads; B is packed only where its layout requires it), for the small shapes of batch-1 and small-batch training
// where a BLAS call's fixed costs (argument checks, packing of A and B, dispatch) are a large part of the work.
//
// Which shapes use it instead of CBLAS is decided by measurement (bench/gemm_choice.cpp, recorded in bench/README.md,
// "GEMM: BLAS or xsimd").
#pragma once

#include <xsimd/xsimd.hpp>

#include "pipeprop/kernels/fma.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <utility>

namespace pipeprop::kernels {

namespace detail {

/// Rows of K packed at a time into a stack panel (panels are at most simd_panel_rows x 2 W values).
inline constexpr std::size_t simd_panel_rows = 256;

/// C block [MR x NV W] of C = alpha op(A) B + beta C, B [K x N] row-major (a row of B is contiguous along N):
/// per k, NV vector loads of B, MR broadcasts of A, MR NV fused multiply-adds; MR NV accumulators in registers.
/// NV W columns of every B row must be readable (a packed, zero-padded panel when the matrix is narrower); of the
/// last vector of each C row only last_cols (1..W) columns are read and written. With beta == 0 C is not read.
/// TransA: A is stored [K x M] (a(r, p) = a[p lda + r]), else [M x K].
template <class T, std::size_t MR, std::size_t NV, bool TransA>
inline void simd_block_nn(std::size_t k, std::size_t last_cols, T alpha, const T* __restrict a, std::size_t lda,
                          const T* __restrict b, std::size_t ldb, T beta, T* __restrict c, std::size_t ldc) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    std::array<std::array<batch, NV>, MR> acc;
    for (auto& row : acc)
        for (auto& v : row) v = batch(T(0));
    for (std::size_t p = 0; p < k; ++p) {
        const T* bp = b + p * ldb;
        std::array<batch, NV> bv;
        for (std::size_t v = 0; v < NV; ++v) bv[v] = batch::load_unaligned(bp + v * w);
        for (std::size_t r = 0; r < MR; ++r) {
            const batch ar(TransA ? a[p * lda + r] : a[r * lda + p]);
            for (std::size_t v = 0; v < NV; ++v) acc[r][v] = kernels::fma(ar, bv[v], acc[r][v]);
        }
    }
    const batch va(alpha), vb(beta);
    const bool read_c = beta != T(0);
    for (std::size_t r = 0; r < MR; ++r) {
        T* cr = c + r * ldc;
        for (std::size_t v = 0; v + 1 < NV; ++v) {
            const batch res =
                read_c ? kernels::fma(va, acc[r][v], vb * batch::load_unaligned(cr + v * w)) : va * acc[r][v];
            res.store_unaligned(cr + v * w);
        }
        T* last = cr + (NV - 1) * w;
        if (last_cols == w) {
            const batch res =
                read_c ? kernels::fma(va, acc[r][NV - 1], vb * batch::load_unaligned(last)) : va * acc[r][NV - 1];
            res.store_unaligned(last);
        } else {
            alignas(64) std::array<T, w> part;
            (va * acc[r][NV - 1]).store_aligned(part.data());
            for (std::size_t j = 0; j < last_cols; ++j) last[j] = read_c ? part[j] + beta * last[j] : part[j];
        }
    }
}

/// Calls f.template operator()<MR>(i) for row blocks [i, i + MR) covering [0, m): blocks of MaxRows, then one
/// smaller block for the remainder (MR a compile-time constant in every call).
template <std::size_t MaxRows, class F>
inline void for_row_blocks(std::size_t m, F&& f) {
    std::size_t i = 0;
    for (; i + MaxRows <= m; i += MaxRows) f.template operator()<MaxRows>(i);
    if constexpr (MaxRows > 1) {
        if (i < m) {
            [&]<std::size_t... R>(std::index_sequence<R...>) {
                ((m - i == R + 1 ? (f.template operator()<R + 1>(i), 0) : 0), ...);
            }(std::make_index_sequence<MaxRows - 1>{});
        }
    }
}

/// Copies columns [j0, j0 + cols) of rows [p0, p0 + kk) of B (row-major, stride ldb) into a panel of width
/// panel_width, zero-padding the columns beyond cols.
template <class T>
inline void pack_columns(const T* b, std::size_t ldb, std::size_t p0, std::size_t kk, std::size_t j0,
                         std::size_t cols, T* panel, std::size_t panel_width) noexcept {
    for (std::size_t p = 0; p < kk; ++p) {
        const T* src = b + (p0 + p) * ldb + j0;
        T* dst = panel + p * panel_width;
        for (std::size_t j = 0; j < cols; ++j) dst[j] = src[j];
        for (std::size_t j = cols; j < panel_width; ++j) dst[j] = T(0);
    }
}

/// C = alpha op(A) B + beta C with B [K x N] not transposed.
template <class T, bool TransA>
inline void simd_gemm_nn(std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
                         const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) noexcept {
    constexpr std::size_t w = xsimd::batch<T>::size;
    const auto a_rows = [&](std::size_t i) { return TransA ? a + i : a + i * lda; };
    const std::size_t n_full = n / w * w;
    if (k <= 2) {
        // Rank-1 / rank-2 updates (weight gradients at b = 1) are memory bound on C: stream C one row at a time.
        for (std::size_t i = 0; i < m; ++i) {
            std::size_t j = 0;
            for (; j + 4 * w <= n_full; j += 4 * w)
                simd_block_nn<T, 1, 4, TransA>(k, w, alpha, a_rows(i), lda, b + j, ldb, beta, c + i * ldc + j, ldc);
            for (; j < n_full; j += w)
                simd_block_nn<T, 1, 1, TransA>(k, w, alpha, a_rows(i), lda, b + j, ldb, beta, c + i * ldc + j, ldc);
        }
    } else {
        // 6 x 2 vectors = 12 accumulators: fits the 16 (AVX2) and 32 (AVX-512) vector registers. Column panels
        // outside, row blocks inside: the [K x 2 W] panel of B stays in L1 while every row block uses it.
        std::size_t j = 0;
        for (; j + 2 * w <= n_full; j += 2 * w)
            for_row_blocks<6>(m, [&]<std::size_t MR>(std::size_t i) {
                simd_block_nn<T, MR, 2, TransA>(k, w, alpha, a_rows(i), lda, b + j, ldb, beta, c + i * ldc + j, ldc);
            });
        if (j < n_full)
            for_row_blocks<6>(m, [&]<std::size_t MR>(std::size_t i) {
                simd_block_nn<T, MR, 1, TransA>(k, w, alpha, a_rows(i), lda, b + j, ldb, beta, c + i * ldc + j, ldc);
            });
    }
    if (n_full == n) return;
    // The last n - n_full (< W) columns: pack them once per K panel, zero-padded to one vector.
    alignas(64) std::array<T, simd_panel_rows * w> panel;
    for (std::size_t p0 = 0; p0 < k || p0 == 0; p0 += simd_panel_rows) {
        const std::size_t kk = std::min(simd_panel_rows, k - p0);
        pack_columns(b, ldb, p0, kk, n_full, n - n_full, panel.data(), w);
        const T beta_p = p0 == 0 ? beta : T(1);
        const auto a_p = [&](std::size_t i) { return TransA ? a + p0 * lda + i : a + i * lda + p0; };
        for_row_blocks<6>(m, [&]<std::size_t MR>(std::size_t i) {
            simd_block_nn<T, MR, 1, TransA>(kk, n - n_full, alpha, a_p(i), lda, panel.data(), w, beta_p,
                                            c + i * ldc + n_full, ldc);
        });
        if (k == 0) break;
    }
}

/// C block [MR x NR] of C = alpha A B^T + beta C, A [M x K] and B [N x K] row-major, for few rows M: every C element
/// is a dot product along K, vectorized over K (MR + NR loads and MR NR fused multiply-adds per vector of K), then
/// reduced; the K remainder is added in scalar arithmetic.
template <class T, std::size_t MR, std::size_t NR>
inline void simd_block_dot(std::size_t k, T alpha, const T* __restrict a, std::size_t lda, const T* __restrict b,
                           std::size_t ldb, T beta, T* __restrict c, std::size_t ldc) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    std::array<std::array<batch, NR>, MR> acc;
    for (auto& row : acc)
        for (auto& v : row) v = batch(T(0));
    std::size_t p = 0;
    for (; p + w <= k; p += w) {
        std::array<batch, NR> bv;
        for (std::size_t q = 0; q < NR; ++q) bv[q] = batch::load_unaligned(b + q * ldb + p);
        for (std::size_t r = 0; r < MR; ++r) {
            const batch av = batch::load_unaligned(a + r * lda + p);
            for (std::size_t q = 0; q < NR; ++q) acc[r][q] = kernels::fma(av, bv[q], acc[r][q]);
        }
    }
    for (std::size_t r = 0; r < MR; ++r)
        for (std::size_t q = 0; q < NR; ++q) {
            T s = xsimd::hadd(acc[r][q]);
            for (std::size_t t = p; t < k; ++t) s += a[r * lda + t] * b[q * ldb + t];
            T& out = c[r * ldc + q];
            out = beta != T(0) ? alpha * s + beta * out : alpha * s;
        }
}

/// C = alpha A B^T + beta C, B [N x K] row-major.
/// M < 4 (dense forward at small b) or N < W: dot products along K. Otherwise B^T is packed, 2 W columns by at most
/// simd_panel_rows rows of K at a time, into a zero-padded stack panel that all row blocks share, and multiplied
/// with the N N block kernel.
template <class T>
inline void simd_gemm_nt(std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
                         const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) noexcept {
    constexpr std::size_t w = xsimd::batch<T>::size;
    if (m < 4 || n < w) {
        for_row_blocks<3>(m, [&]<std::size_t MR>(std::size_t i) {
            std::size_t j = 0;
            for (; j + 4 <= n; j += 4)
                simd_block_dot<T, MR, 4>(k, alpha, a + i * lda, lda, b + j * ldb, ldb, beta, c + i * ldc + j, ldc);
            for (; j < n; ++j)
                simd_block_dot<T, MR, 1>(k, alpha, a + i * lda, lda, b + j * ldb, ldb, beta, c + i * ldc + j, ldc);
        });
        return;
    }
    constexpr std::size_t nc = 2 * w;
    alignas(64) std::array<T, simd_panel_rows * nc> panel;
    for (std::size_t j0 = 0; j0 < n; j0 += nc) {
        const std::size_t nj = std::min(nc, n - j0);
        for (std::size_t p0 = 0; p0 < k || p0 == 0; p0 += simd_panel_rows) {
            const std::size_t kk = std::min(simd_panel_rows, k - p0);
            for (std::size_t jj = 0; jj < nj; ++jj) {
                const T* src = b + (j0 + jj) * ldb + p0;
                for (std::size_t p = 0; p < kk; ++p) panel[p * nc + jj] = src[p];
            }
            for (std::size_t jj = nj; jj < nc; ++jj)
                for (std::size_t p = 0; p < kk; ++p) panel[p * nc + jj] = T(0);
            const T beta_p = p0 == 0 ? beta : T(1);
            for_row_blocks<6>(m, [&]<std::size_t MR>(std::size_t i) {
                if (nj > w)
                    simd_block_nn<T, MR, 2, false>(kk, nj - w, alpha, a + i * lda + p0, lda, panel.data(), nc, beta_p,
                                                   c + i * ldc + j0, ldc);
                else
                    simd_block_nn<T, MR, 1, false>(kk, nj, alpha, a + i * lda + p0, lda, panel.data(), nc, beta_p,
                                                   c + i * ldc + j0, ldc);
            });
            if (k == 0) break;
        }
    }
}

}  // namespace detail

/// C[M x N] = alpha * op(A) * op(B) + beta * C, all row-major, computed with xsimd register blocking (same contract
/// as kernels::gemm in gemm.hpp: op(A) is [M x K], op(B) is [K x N]; lda/ldb/ldc are row strides in elements as
/// stored). With beta == 0, C is not read (it may hold anything, NaN included). Throws nothing, allocates nothing
/// (panels live on the stack: at most 2 * 256 * W values). Both operands transposed (unused by the layers) is
/// computed with plain loops.
template <class T>
void simd_gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a,
               std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) noexcept {
    if (m == 0 || n == 0) return;
    if (!trans_b) {
        if (trans_a)
            detail::simd_gemm_nn<T, true>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        else
            detail::simd_gemm_nn<T, false>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    } else if (!trans_a) {
        detail::simd_gemm_nt<T>(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    } else {
        for (std::size_t i = 0; i < m; ++i)
            for (std::size_t j = 0; j < n; ++j) {
                T s = 0;
                for (std::size_t p = 0; p < k; ++p) s += a[p * lda + i] * b[j * ldb + p];
                c[i * ldc + j] = beta != T(0) ? alpha * s + beta * c[i * ldc + j] : alpha * s;
            }
    }
}

}  // namespace pipeprop::kernels
