// pipeprop/kernels/simd_gemm_blocks.hpp: the register-blocked micro-kernel of kernels::simd_gemm (simd_gemm.hpp)
// and its helpers: the register-block sizes of the compiled architecture, the C block kernel simd_block_nn
// (C [MR x NV W] of alpha op(A) B + beta C), the row-block loop over M and the packing of B's columns into a
// zero-padded stack panel. Raw pointers, row-major, no allocation, no exceptions; the drivers that choose the blocks
// for a whole matrix are in simd_gemm.hpp.
#pragma once

#include <xsimd/xsimd.hpp>

#include "pipeprop/kernels/fma.hpp"
#include "pipeprop/kernels/register_kernel.hpp"
#include "pipeprop/kernels/unroll.hpp"

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <utility>

namespace pipeprop::kernels::detail {
/// Rows of K packed at a time into a stack panel (panels are at most simd_panel_rows x 2 W values).
inline constexpr std::size_t simd_panel_rows = 256;

/// Rows of C per register block of 2 vectors: 8 where there are 32 vector registers (AVX-512: 16 accumulators),
/// 6 where there are 16 (AVX2, SSE: 12 accumulators), leaving registers for the 2 loaded B vectors and A's broadcast.
template <class T>
inline constexpr std::size_t simd_rows_2v = sizeof(xsimd::batch<T>) >= 64 ? 8 : 6;
/// Rows of C per register block of 1 vector (N's last vectors): 8 or 12 accumulators, enough independent chains of
/// fused multiply-adds to cover the FMA latency times the FMA units (4 cycles x 2 on current x86 cores).
template <class T>
inline constexpr std::size_t simd_rows_1v = sizeof(xsimd::batch<T>) >= 64 ? 8 : 12;

/// C block [MR x NV W] of C = alpha op(A) B + beta C, B [K x N] row-major (a row of B is contiguous along N):
/// per k, NV vector loads of B, MR broadcasts of A, MR NV fused multiply-adds; MR NV accumulators in registers.
/// NV W columns of every B row must be readable (a packed, zero-padded panel when the matrix is narrower, or a
/// vector that overlaps columns already computed); of the last vector of each C row only the columns
/// [skip_cols, last_cols) (0 <= skip_cols < last_cols <= W) are read and written. With beta == 0 C is not read.
/// TransA: A is stored [K x M] (a(r, p) = a[p lda + r]), else [M x K]. Every element of C is the same arithmetic
/// whatever MR, NV and the lanes stored: a chain of fused multiply-adds over k from 0, then alpha acc + beta c with
/// one rounding (alpha acc when beta == 0).
/// Never inlined nor cloned (PIPEPROP_REGISTER_KERNEL, kernels/register_kernel.hpp, as the other register-blocked
/// kernels here): inlined into the large simd_gemm_nn, GCC 12 kept the loaded B vectors on the stack and reloaded them
/// for every fused multiply-add (half the speed at 6 x 2 and 8 x 2 blocks, AVX-512); cloned for simd_gemm_nt's
/// constant arguments (skip_cols = 0, ldb = 2 W) it kept one B vector there (62 against 98 GFLOP/s on llama-tiny's
/// 64 x 192 x 64 forward, AVX2). Compiled alone, all accumulators and B vectors stay in registers, and a call per
/// block costs nothing next to its K loop.
template <class T, std::size_t MR, std::size_t NV, bool TransA>
PIPEPROP_REGISTER_KERNEL
inline void simd_block_nn(std::size_t k, std::size_t skip_cols, std::size_t last_cols, T alpha,
                          const T* __restrict a, std::size_t lda, const T* __restrict b,
                          std::size_t ldb, T beta, T* __restrict c, std::size_t ldc) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    if (k == 0) {
        // C = beta C. Apart from the K loop so that GCC keeps the accumulators below in registers from start to end
        // (with a path on which the loop runs zero times, it kept them in memory outside the loop).
        PIPEPROP_UNROLL
        for (std::size_t r = 0; r < MR; ++r)
            for (std::size_t j = 0; j < NV * w; ++j)
                if (j < (NV - 1) * w || (j - (NV - 1) * w >= skip_cols && j - (NV - 1) * w < last_cols))
                    c[r * ldc + j] = beta != T(0) ? beta * c[r * ldc + j] : T(0);
        return;
    }
    std::array<std::array<batch, NV>, MR> acc;
    PIPEPROP_UNROLL
    for (auto& row : acc)
        PIPEPROP_UNROLL
        for (auto& v : row) v = batch(T(0));
    for (std::size_t p = 0; p < k; ++p) {
        const T* bp = b + p * ldb;
        std::array<batch, NV> bv;
        PIPEPROP_UNROLL
        for (std::size_t v = 0; v < NV; ++v) bv[v] = batch::load_unaligned(bp + v * w);
        PIPEPROP_UNROLL
        for (std::size_t r = 0; r < MR; ++r) {
            const batch ar(TransA ? a[p * lda + r] : a[r * lda + p]);
            PIPEPROP_UNROLL
            for (std::size_t v = 0; v < NV; ++v) acc[r][v] = kernels::fma(ar, bv[v], acc[r][v]);
        }
    }
    // Stores: full vectors in loops without branches (unrolled, the accumulators stay in registers), the partial
    // last vector, when there is one, after them.
    const batch va(alpha), vb(beta);
    const bool full_last = skip_cols == 0 && last_cols == w;
    constexpr std::size_t nv_sure = NV - 1;  // vectors of a row that are always full
    if (beta != T(0)) {
        PIPEPROP_UNROLL
        for (std::size_t r = 0; r < MR; ++r)
            PIPEPROP_UNROLL
            for (std::size_t v = 0; v < nv_sure; ++v) {
                T* cv = c + r * ldc + v * w;
                kernels::fma(va, acc[r][v], vb * batch::load_unaligned(cv)).store_unaligned(cv);
            }
        if (full_last)
            PIPEPROP_UNROLL
            for (std::size_t r = 0; r < MR; ++r) {
                T* cv = c + r * ldc + nv_sure * w;
                kernels::fma(va, acc[r][nv_sure], vb * batch::load_unaligned(cv)).store_unaligned(cv);
            }
    } else {
        PIPEPROP_UNROLL
        for (std::size_t r = 0; r < MR; ++r)
            PIPEPROP_UNROLL
            for (std::size_t v = 0; v < nv_sure; ++v) (va * acc[r][v]).store_unaligned(c + r * ldc + v * w);
        if (full_last)
            PIPEPROP_UNROLL
            for (std::size_t r = 0; r < MR; ++r) (va * acc[r][nv_sure]).store_unaligned(c + r * ldc + nv_sure * w);
    }
    if (!full_last) {
        // The same arithmetic as the full vectors, lane by lane (std::fma rounds once, as kernels::fma does), so an
        // element's value does not depend on which block stored it. Copied out first with constant indices: a loop
        // over acc with an inner loop would keep acc in memory.
        alignas(64) std::array<std::array<T, w>, MR> part;
        PIPEPROP_UNROLL
        for (std::size_t r = 0; r < MR; ++r) acc[r][nv_sure].store_aligned(part[r].data());
        PIPEPROP_UNROLL
        for (std::size_t r = 0; r < MR; ++r) {
            T* last = c + r * ldc + nv_sure * w;
            for (std::size_t j = skip_cols; j < last_cols; ++j)
                last[j] = beta != T(0) ? std::fma(alpha, part[r][j], beta * last[j]) : alpha * part[r][j];
        }
    }
}

/// The rows [i, m) (fewer than 2 Rows) of for_row_blocks in blocks of Rows, Rows / 2, ..., 1 (at most one each).
template <std::size_t Rows, class F>
inline void for_remainder_blocks(std::size_t m, std::size_t i, F& f) {
    if (m - i >= Rows) {
        f.template operator()<Rows>(i);
        i += Rows;
    }
    if constexpr (Rows > 1) for_remainder_blocks<Rows / 2>(m, i, f);
}

/// Calls f.template operator()<MR>(i) for row blocks [i, i + MR) covering [0, m): blocks of MaxRows, then the
/// remainder (< MaxRows rows) as at most one block of each power of two below MaxRows, largest first (MR a
/// compile-time constant in every call). Powers of two only, so that a kernel is compiled for about log2(MaxRows)
/// block heights instead of MaxRows: every element of C is the same arithmetic whatever block computes it.
template <std::size_t MaxRows, class F>
inline void for_row_blocks(std::size_t m, F&& f) {
    std::size_t i = 0;
    for (; i + MaxRows <= m; i += MaxRows) f.template operator()<MaxRows>(i);
    if constexpr (MaxRows > 1) for_remainder_blocks<std::bit_floor(MaxRows - 1)>(m, i, f);
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

}  // namespace pipeprop::kernels::detail
