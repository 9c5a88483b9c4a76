// pipeprop/kernels/small_gemm.hpp: C [m x N] (+)= op(A) [m x k] B [k x N] for a small, compile-time N (a whole number
// of SIMD vectors, B a panel that stays in L1), in register blocks of MR rows x NV vectors: the 16 GEMMs per pass of
// conv2d's Winograd form (layers/conv2d_winograd.hpp: [tiles, C] x [C, OC] with C, OC = 16 ... 64, and the
// transposed [C, tiles] x [tiles, OC] of its p2). The general xsimd GEMM (kernels/simd_gemm.hpp) measured 1.4x slower
// at these shapes: its 8-row blocks reload C for every 16 multiply-adds of a row when k = 16.
// Each element of C is one chain of fused multiply-adds over k in order (from 0, or from C's value with accumulate),
// the same for every m and every block, so a row's result does not depend on the rows around it. No errors.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstddef>

#include "pipeprop/kernels/fma.hpp"
#include "pipeprop/kernels/register_kernel.hpp"
#include "pipeprop/kernels/unroll.hpp"

namespace pipeprop::kernels {

namespace detail {

/// Rows of C in the register block of small_gemm for NV vectors per row: MR * NV accumulators plus NV vectors of B
/// and one broadcast fit the vector registers (32 with AVX-512, 16 otherwise).
template <class T, std::size_t NV>
inline constexpr std::size_t small_gemm_rows =
    sizeof(T) * xsimd::batch<T>::size >= 64 ? (NV == 1 ? 14 : NV == 2 ? 12 : 6) : (NV == 1 ? 12 : 6);

/// One block: rows [m0, m0 + Rows) of C, vectors [n0, n0 + NV vw) of N (every size known at compile time, so each
/// row's A elements are one address plus a constant). Never inlined nor cloned (PIPEPROP_REGISTER_KERNEL), so that it
/// compiles the same in a small test and inside a whole network's layer code.
template <class T, bool TransA, std::size_t K, std::size_t N, std::size_t Lda, std::size_t NV, std::size_t Rows>
PIPEPROP_REGISTER_KERNEL void small_gemm_block(std::size_t m0, std::size_t n0, const T* a, const T* b, T* c,
                                               bool accumulate) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t vw = batch::size;
    batch acc[Rows][NV];
    PIPEPROP_UNROLL for (std::size_t r = 0; r < Rows; ++r)
        PIPEPROP_UNROLL for (std::size_t v = 0; v < NV; ++v)
            acc[r][v] = accumulate ? batch::load_unaligned(c + (m0 + r) * N + n0 + v * vw) : batch(T(0));
    const T* ar = TransA ? a + m0 : a + m0 * Lda;
    for (std::size_t kk = 0; kk < K; ++kk) {
        batch bv[NV];
        PIPEPROP_UNROLL for (std::size_t v = 0; v < NV; ++v) bv[v] = batch::load_unaligned(b + kk * N + n0 + v * vw);
        PIPEPROP_UNROLL for (std::size_t r = 0; r < Rows; ++r) {
            const batch av(TransA ? ar[kk * Lda + r] : ar[r * Lda + kk]);
            PIPEPROP_UNROLL for (std::size_t v = 0; v < NV; ++v) acc[r][v] = kernels::fma(av, bv[v], acc[r][v]);
        }
    }
    PIPEPROP_UNROLL for (std::size_t r = 0; r < Rows; ++r)
        PIPEPROP_UNROLL for (std::size_t v = 0; v < NV; ++v) acc[r][v].store_unaligned(c + (m0 + r) * N + n0 + v * vw);
}

}  // namespace detail

/// C [M x N] = op(A) B, or C += op(A) B with accumulate. op(A) = A [M x K] (row stride Lda) or, with TransA, the
/// transpose of A [K x M] (row stride Lda); B [K x N] and C [M x N] with row stride N; N a multiple of the SIMD
/// width.
template <class T, bool TransA, std::size_t M, std::size_t K, std::size_t N, std::size_t Lda>
void small_gemm(const T* a, const T* b, T* c, bool accumulate) noexcept {
    constexpr std::size_t vw = xsimd::batch<T>::size;
    static_assert(N % vw == 0, "pipeprop::kernels::small_gemm: N must be a whole number of SIMD vectors.");
    // vectors per row of a block: the most (at most 4 with AVX-512, 2 otherwise) that divide N's vectors
    constexpr std::size_t nv = [] {
        std::size_t d = sizeof(T) * vw >= 64 ? 4 : 2;
        while ((N / vw) % d != 0) --d;
        return d;
    }();
    // M rows in the fewest blocks of at most small_gemm_rows, as even as the division allows (14 rows of at most 6:
    // 5 + 5 + 4, not 6 + 6 + 2, whose 2-row block has too few independent accumulators to hide the FMA latency)
    constexpr std::size_t most = detail::small_gemm_rows<T, nv>;
    constexpr std::size_t blocks = (M + most - 1) / most;
    constexpr std::size_t rows = blocks == 0 ? 1 : (M + blocks - 1) / blocks;
    for (std::size_t n0 = 0; n0 < N; n0 += nv * vw) {
        for (std::size_t m0 = 0; m0 + rows <= M; m0 += rows)
            detail::small_gemm_block<T, TransA, K, N, Lda, nv, rows>(m0, n0, a, b, c, accumulate);
        if constexpr (M % rows != 0)
            detail::small_gemm_block<T, TransA, K, N, Lda, nv, M % rows>(M - M % rows, n0, a, b, c, accumulate);
    }
}

}  // namespace pipeprop::kernels
