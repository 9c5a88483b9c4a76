// pipeprop/kernels/simd_gemm.hpp: a register-blocked GEMM written once over xsimd::batch (no threads; B is packed
// only where its layout requires it), for the small shapes of batch-1 and small-batch training where a BLAS call's
// fixed costs (argument checks, packing of A and B, dispatch) are a large part of the work:
//   - op(A) B (conv2d forward and p1, dense p1): blocks of 8 x 2 vectors of C with AVX-512, 6 x 2 with AVX2, then
//     one-vector blocks; the few columns N leaves after its last whole vector (N = 49 or 196 at 7 x 7 or 14 x 14
//     pixels) as one GEMV each; one row of C at a time where M < 4 (GEMV-shaped) or K <= 2 (rank-1 / rank-2 updates);
//   - A B^T (conv2d p2, dense forward): dot products along K where M < 4, N < W or M is small against a long K, B^T
//     packed into stack panels otherwise.
// This header holds the drivers that cover a whole C with blocks; the register-blocked micro-kernel and B's packing
// are in simd_gemm_blocks.hpp, the GEMV- and GER-shaped kernels in simd_gemv.hpp. Block sizes follow the vector width
// and register count of the compiled architecture (sizeof(xsimd::batch<T>)). Which shapes use this kernel instead of
// CBLAS is decided by measurement (bench/gemm_choice.cpp, recorded in bench/README.md, "GEMM: BLAS or xsimd" and
// "Kernels at b = 1").
#pragma once

#include <xsimd/xsimd.hpp>

#include "pipeprop/kernels/fma.hpp"
#include "pipeprop/kernels/register_kernel.hpp"
#include "pipeprop/kernels/unroll.hpp"
#include "pipeprop/kernels/simd_gemm_blocks.hpp"
#include "pipeprop/kernels/simd_gemv.hpp"
#include "pipeprop/kernels/transpose_copy.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace pipeprop::kernels {

namespace detail {

template <class T>
inline void simd_gemm_nt(std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
                         const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) noexcept;
template <class T, bool TransA>
inline void simd_gemm_nn(std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
                         const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) noexcept;

/// Columns [j0, j0 + r) of C = alpha op(A) B + beta C (B [K x N] row-major, K >= 1), one GEMV per column: column j
/// of C is op(A) times column j of B. For the few columns N leaves after its last whole vector (conv2d at 7 x 7 or
/// 14 x 14 pixels: N = 49, 196), which a vector block would compute at r / W of its speed. B's column is copied to a
/// contiguous stack buffer x, K in chunks of simd_panel_rows, and y = op(A) x (rows of C in chunks of
/// simd_panel_rows) is accumulated over the K chunks: the N T GEMV (simd_row_dots) for A [M x K], the N N GEMV (one
/// row, simd_block_nn) for A stored [K x M]. Then C's column = y + beta C (C not read if beta == 0).
template <class T, bool TransA>
inline void simd_tail_columns(std::size_t m, std::size_t j0, std::size_t r, std::size_t k, T alpha, const T* a,
                       std::size_t lda, const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) noexcept {
    alignas(64) std::array<T, simd_panel_rows> x, y;
    for (std::size_t j = j0; j < j0 + r; ++j)
        for (std::size_t i0 = 0; i0 < m; i0 += simd_panel_rows) {
            const std::size_t mi = std::min(simd_panel_rows, m - i0);
            for (std::size_t p0 = 0; p0 < k; p0 += simd_panel_rows) {
                const std::size_t kk = std::min(simd_panel_rows, k - p0);
                for (std::size_t p = 0; p < kk; ++p) x[p] = b[(p0 + p) * ldb + j];
                const T acc = p0 == 0 ? T(0) : T(1);
                if constexpr (TransA)  // y[i] += sum_p x[p] a[p, i]: a row vector times A's rows
                    simd_gemm_nn<T, false>(1, mi, kk, alpha, x.data(), kk, a + p0 * lda + i0, lda, acc, y.data(), mi);
                else  // y[i] += a[i, :] . x
                    simd_gemm_nt<T>(1, mi, kk, alpha, x.data(), kk, a + i0 * lda + p0, lda, acc, y.data(), mi);
            }
            for (std::size_t i = 0; i < mi; ++i) {
                T& cij = c[(i0 + i) * ldc + j];
                cij = beta != T(0) ? y[i] + beta * cij : y[i];
            }
        }
}

/// C = alpha op(A) B + beta C with B [K x N] not transposed.
/// K <= 2 (rank-1 / rank-2 updates): simd_rank_update_row per row of C (short rows: all in one call). M < 4 with
/// N >= W (GEMV-shaped): one C row at a time in blocks of up to 8 vectors, B read from aligned addresses (see there).
/// Otherwise column blocks of 2 vectors x simd_rows_2v rows (B's [K x 2 W] panel stays in L1 while every row block
/// uses it), then the last full vector in blocks of simd_rows_1v rows; of the last N - N_full (< W) columns, at most
/// W / 2 are one GEMV each (simd_tail_columns), more are lanes of one vector block over [N - W, N) that loads B's last
/// W columns (overlapping the columns already done) where N >= W, or K panels of those columns packed zero-padded on
/// the stack where N < W.
template <class T, bool TransA>
inline void simd_gemm_nn(std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
                         const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) noexcept {
    constexpr std::size_t w = xsimd::batch<T>::size;
    const auto a_rows = [&](std::size_t i) { return TransA ? a + i : a + i * lda; };
    const std::size_t n_full = n / w * w;
    if (k <= 2) {
        // Rank-1 / rank-2 updates (weight gradients at b = 1) are memory bound on C: stream C one row at a time.
        if (n < simd_long_row<T>)
            simd_rank_update_short_rows<T>(m, n, k, alpha, a, TransA ? 1 : lda, TransA ? lda : 1, b, ldb, beta, c,
                                           ldc);
        else
            for (std::size_t i = 0; i < m; ++i) {
                const auto s = rank_update_scalars<TransA>(k, a, lda, i);
                simd_rank_update_row<T>(k, n, alpha, s[0], s[1], b, ldb, beta, c + i * ldc);
            }
        return;
    }
    if (m < 4 && n >= w) {
        // GEMV-shaped (dense backward-p1 dx = W^T dy at b < 4): one C row at a time in blocks of 8, 4, 2 and 1
        // vectors, so that up to 8 independent accumulator chains hide the FMA latency (a 6 x 2 block would give a
        // single row only 2). B's rows (a weight matrix streamed once) are read from vector-aligned addresses where
        // their stride allows it: the first j0 < W columns are lanes of a vector block over [0, W), the last ones
        // lanes of one over [N - W, N), and every element is the same arithmetic whichever block stores it
        // (simd_block_nn), so the result does not depend on the buffers' alignment.
        // Peeled only on long rows (simd_long_row): the two extra one-vector blocks cost more on short ones.
        const std::size_t j0 =
            n >= simd_long_row<T> ? (w - reinterpret_cast<std::uintptr_t>(b) / sizeof(T) % w) % w : std::size_t(0);
        for (std::size_t i = 0; i < m; ++i) {
            const T* ai = a_rows(i);
            T* ci = c + i * ldc;
            if (j0 > 0) simd_block_nn<T, 1, 1, TransA>(k, 0, j0, alpha, ai, lda, b, ldb, beta, ci, ldc);
            const std::size_t end = j0 + (n - j0) / w * w;
            std::size_t j = j0;
            for (; j + 8 * w <= end; j += 8 * w)
                simd_block_nn<T, 1, 8, TransA>(k, 0, w, alpha, ai, lda, b + j, ldb, beta, ci + j, ldc);
            if (j + 4 * w <= end) {
                simd_block_nn<T, 1, 4, TransA>(k, 0, w, alpha, ai, lda, b + j, ldb, beta, ci + j, ldc);
                j += 4 * w;
            }
            if (j + 2 * w <= end) {
                simd_block_nn<T, 1, 2, TransA>(k, 0, w, alpha, ai, lda, b + j, ldb, beta, ci + j, ldc);
                j += 2 * w;
            }
            if (j < end) simd_block_nn<T, 1, 1, TransA>(k, 0, w, alpha, ai, lda, b + j, ldb, beta, ci + j, ldc);
            if (end < n)
                simd_block_nn<T, 1, 1, TransA>(k, w - (n - end), w, alpha, ai, lda, b + n - w, ldb, beta,
                                               ci + n - w, ldc);
        }
        return;
    }
    if (m >= 4) {
        std::size_t j = 0;
        for (; j + 2 * w <= n_full; j += 2 * w)
            for_row_blocks<simd_rows_2v<T>>(m, [&]<std::size_t MR>(std::size_t i) {
                simd_block_nn<T, MR, 2, TransA>(k, 0, w, alpha, a_rows(i), lda, b + j, ldb, beta, c + i * ldc + j,
                                                ldc);
            });
        if (j < n_full)
            for_row_blocks<simd_rows_1v<T>>(m, [&]<std::size_t MR>(std::size_t i) {
                simd_block_nn<T, MR, 1, TransA>(k, 0, w, alpha, a_rows(i), lda, b + j, ldb, beta, c + i * ldc + j,
                                                ldc);
            });
    }
    if (n_full == n) return;
    if (2 * (n - n_full) <= w) {
        // At most W / 2 columns left: one GEMV each (an overlapping vector block would do W times their work).
        simd_tail_columns<T, TransA>(m, n_full, n - n_full, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    if (n >= w) {
        // The last n - n_full columns as lanes [w - (n - n_full), w) of the vector over columns [n - w, n).
        const std::size_t j = n - w, skip = w - (n - n_full);
        for_row_blocks<simd_rows_1v<T>>(m, [&]<std::size_t MR>(std::size_t i) {
            simd_block_nn<T, MR, 1, TransA>(k, skip, w, alpha, a_rows(i), lda, b + j, ldb, beta, c + i * ldc + j, ldc);
        });
        return;
    }
    // N < W: pack the columns once per K panel, zero-padded to one vector.
    alignas(64) std::array<T, simd_panel_rows * w> panel;
    for (std::size_t p0 = 0; p0 < k || p0 == 0; p0 += simd_panel_rows) {
        const std::size_t kk = std::min(simd_panel_rows, k - p0);
        pack_columns(b, ldb, p0, kk, 0, n, panel.data(), w);
        const T beta_p = p0 == 0 ? beta : T(1);
        const auto a_p = [&](std::size_t i) { return TransA ? a + p0 * lda + i : a + i * lda + p0; };
        for_row_blocks<simd_rows_1v<T>>(m, [&]<std::size_t MR>(std::size_t i) {
            simd_block_nn<T, MR, 1, TransA>(kk, 0, n, alpha, a_p(i), lda, panel.data(), w, beta_p, c + i * ldc, ldc);
        });
        if (k == 0) break;
    }
}

/// C block [MR x NR] of C = alpha A B^T + beta C, A [M x K] and B [N x K] row-major, for few rows M: every C element
/// is a dot product along K, vectorized over K (MR + NR loads and MR NR fused multiply-adds per vector of K), the K
/// remainder (< W) as one more vector zero-padded on the stack, then reduced by xsimd::hadd. With beta == 0 C is
/// not read.
template <class T, std::size_t MR, std::size_t NR>
PIPEPROP_REGISTER_KERNEL
inline void simd_block_dot(std::size_t k, T alpha, const T* __restrict a, std::size_t lda,
                           const T* __restrict b, std::size_t ldb, T beta, T* __restrict c,
                           std::size_t ldc) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    std::array<std::array<batch, NR>, MR> acc;
    PIPEPROP_UNROLL
    for (auto& row : acc)
        PIPEPROP_UNROLL
        for (auto& v : row) v = batch(T(0));
    const std::size_t k_full = k / w * w;
    for (std::size_t p = 0; p < k_full; p += w) {
        std::array<batch, NR> bv;
        PIPEPROP_UNROLL
        for (std::size_t q = 0; q < NR; ++q) bv[q] = batch::load_unaligned(b + q * ldb + p);
        PIPEPROP_UNROLL
        for (std::size_t r = 0; r < MR; ++r) {
            const batch av = batch::load_unaligned(a + r * lda + p);
            PIPEPROP_UNROLL
            for (std::size_t q = 0; q < NR; ++q) acc[r][q] = kernels::fma(av, bv[q], acc[r][q]);
        }
    }
    if (k_full < k) {
        alignas(64) std::array<std::array<T, w>, MR> at{};
        alignas(64) std::array<std::array<T, w>, NR> bt{};
        for (std::size_t t = k_full; t < k; ++t) {
            for (std::size_t r = 0; r < MR; ++r) at[r][t - k_full] = a[r * lda + t];
            for (std::size_t q = 0; q < NR; ++q) bt[q][t - k_full] = b[q * ldb + t];
        }
        std::array<batch, NR> bv;
        PIPEPROP_UNROLL
        for (std::size_t q = 0; q < NR; ++q) bv[q] = batch::load_aligned(bt[q].data());
        PIPEPROP_UNROLL
        for (std::size_t r = 0; r < MR; ++r) {
            const batch av = batch::load_aligned(at[r].data());
            PIPEPROP_UNROLL
            for (std::size_t q = 0; q < NR; ++q) acc[r][q] = kernels::fma(av, bv[q], acc[r][q]);
        }
    }
    PIPEPROP_UNROLL
    for (std::size_t r = 0; r < MR; ++r)
        PIPEPROP_UNROLL
        for (std::size_t q = 0; q < NR; ++q) {
            const T s = alpha * reduce_add(acc[r][q]);
            T& out = c[r * ldc + q];
            out = beta != T(0) ? s + beta * out : s;
        }
}

/// Rows of A per block of simd_block_dot (with 4 rows of B): 4 x 4 = 16 accumulators where there are 32 vector
/// registers, 3 x 4 = 12 where there are 16.
template <class T>
inline constexpr std::size_t simd_dot_rows = sizeof(xsimd::batch<T>) >= 64 ? 4 : 3;

/// C = alpha A B^T + beta C, B [N x K] row-major.
/// M < 4 (dense forward at small b: GEMV-shaped): each row of C from simd_row_dots, 8 rows of B at a time. N < W, or
/// M <= 2 W with K >= 16 W: dot products along K in blocks of simd_dot_rows x 4. Otherwise B^T is packed, 2 W
/// columns by at most simd_panel_rows rows of K at a time, into a zero-padded stack panel that all row blocks share,
/// and multiplied with the N N block kernel.
template <class T>
inline void simd_gemm_nt(std::size_t m, std::size_t n, std::size_t k, T alpha, const T* a, std::size_t lda,
                         const T* b, std::size_t ldb, T beta, T* c, std::size_t ldc) noexcept {
    constexpr std::size_t w = xsimd::batch<T>::size;
    if (m < 4) {
        for (std::size_t i = 0; i < m; ++i) {
            std::size_t j = 0;
            for (; j + 8 <= n; j += 8)
                simd_row_dots<T, 8>(k, alpha, a + i * lda, b + j * ldb, ldb, beta, c + i * ldc + j);
            simd_row_dots_remainder<T, 4>(n - j, k, alpha, a + i * lda, b + j * ldb, ldb, beta, c + i * ldc + j);
        }
        return;
    }
    if (n < w || (m <= 2 * w && k >= 16 * w)) {
        // Few columns, or few rows of C against a long K (conv2d backward-p2 at 28 x 28 pixels: 16 x 144 x 784):
        // packing B^T (a transpose of N K values) would cost more than the M N K / W fused multiply-adds it
        // feeds, so dot products along K, where A and B both are contiguous.
        for_row_blocks<simd_dot_rows<T>>(m, [&]<std::size_t MR>(std::size_t i) {
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
            transpose_copy(nj, kk, b + j0 * ldb + p0, ldb, panel.data(), nc);
            for (std::size_t jj = nj; jj < nc; ++jj)
                for (std::size_t p = 0; p < kk; ++p) panel[p * nc + jj] = T(0);
            const T beta_p = p0 == 0 ? beta : T(1);
            if (nj > w)
                for_row_blocks<simd_rows_2v<T>>(m, [&]<std::size_t MR>(std::size_t i) {
                    simd_block_nn<T, MR, 2, false>(kk, 0, nj - w, alpha, a + i * lda + p0, lda, panel.data(), nc,
                                                   beta_p, c + i * ldc + j0, ldc);
                });
            else
                for_row_blocks<simd_rows_1v<T>>(m, [&]<std::size_t MR>(std::size_t i) {
                    simd_block_nn<T, MR, 1, false>(kk, 0, nj, alpha, a + i * lda + p0, lda, panel.data(), nc, beta_p,
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
