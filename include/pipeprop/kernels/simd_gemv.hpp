// pipeprop/kernels/simd_gemv.hpp: the GEMV- and GER-shaped kernels behind kernels::simd_gemm (simd_gemm.hpp) at
// micro-batch size 1 and 2, written once over xsimd::batch: a dense layer's forward y = W x (dot products of W's rows
// with x) and its backward-p2 dW += dy x^T (a rank-1 update streamed over dW's rows). Its backward-p1 dx = W^T dy
// runs simd_gemm's one-row register blocks (8 vectors wide). Measured against OpenBLAS cblas_sgemv / cblas_sger in
// bench/gemm_choice.cpp and bench/layers_bench.cpp (bench/README.md, "Kernels at b = 1"). Kernels with a K loop
// are PIPEPROP_REGISTER_KERNEL (never inlined nor cloned), for the reasons given at simd_block_nn
// (simd_gemm_blocks.hpp).
#pragma once

#include <xsimd/xsimd.hpp>

#include "pipeprop/kernels/fma.hpp"
#include "pipeprop/kernels/register_kernel.hpp"
#include "pipeprop/kernels/unroll.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace pipeprop::kernels::detail {

/// xsimd::hadd(v), the sum of v's lanes. GCC 12 reports its own _mm512_undefined_pd (used by xsimd 8.1's AVX-512
/// hadd of doubles) as uninitialized wherever that hadd is inlined into a kernel; the false warning is silenced here.
template <class T, class A>
[[nodiscard]] inline T reduce_add(const xsimd::batch<T, A>& v) noexcept {
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
    return xsimd::hadd(v);
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
}

/// Rows of at least this many elements (1 KiB) are worth peeling to vector-aligned addresses and a call per row;
/// shorter ones (a dense layer to 10 outputs: 64, 128) are not.
template <class T>
inline constexpr std::size_t simd_long_row = 1024 / sizeof(T);

/// Independent accumulator chains the GEMV-shaped dot products keep in registers: half the vector registers (16 of
/// AVX-512's 32, 8 of AVX2's or SSE's 16), enough to cover the FMA latency times the FMA units of current x86 cores.
template <class T>
inline constexpr std::size_t simd_dot_chains = sizeof(xsimd::batch<T>) >= 64 ? 16 : 8;

/// c[q] = alpha a . b_q + beta c[q] for q < NR: dot products of one row a [K] with NR rows of B (row q at b + q ldb),
/// the GEMV y = W x of a dense forward at b = 1. Vectorized over K with U = simd_dot_chains / NR accumulators per row
/// of B (k unrolled U vectors deep), so NR U independent chains of fused multiply-adds hide the FMA latency while
/// only NR rows of B are streamed at a time. The last full vectors of K go to each row's first accumulator, the K
/// remainder (< W) as one more vector zero-padded on the stack; a row's U accumulators are added in order and
/// reduced by xsimd::hadd. With beta == 0 c is not read. (xsimd::haddp, which would reduce W rows at once, is not
/// used: GCC 12 warns inside xsimd 8.1's AVX-512 version of it.)
template <class T, std::size_t NR>
PIPEPROP_REGISTER_KERNEL
inline void simd_row_dots(std::size_t k, T alpha, const T* __restrict a, const T* __restrict b,
                          std::size_t ldb, T beta, T* __restrict c) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    constexpr std::size_t u = simd_dot_chains<T> / NR > 0 ? simd_dot_chains<T> / NR : 1;
    std::array<std::array<batch, u>, NR> acc;
    PIPEPROP_UNROLL
    for (auto& row : acc)
        PIPEPROP_UNROLL
        for (auto& v : row) v = batch(T(0));
    std::size_t p = 0;
    for (; p + u * w <= k; p += u * w)
        PIPEPROP_UNROLL
        for (std::size_t v = 0; v < u; ++v) {
            const batch av = batch::load_unaligned(a + p + v * w);
            PIPEPROP_UNROLL
            for (std::size_t q = 0; q < NR; ++q)
                acc[q][v] = kernels::fma(av, batch::load_unaligned(b + q * ldb + p + v * w), acc[q][v]);
        }
    for (; p + w <= k; p += w) {
        const batch av = batch::load_unaligned(a + p);
        PIPEPROP_UNROLL
        for (std::size_t q = 0; q < NR; ++q)
            acc[q][0] = kernels::fma(av, batch::load_unaligned(b + q * ldb + p), acc[q][0]);
    }
    if (p < k) {
        alignas(64) std::array<T, w> at{}, bt{};
        for (std::size_t t = p; t < k; ++t) at[t - p] = a[t];
        const batch av = batch::load_aligned(at.data());
        PIPEPROP_UNROLL
        for (std::size_t q = 0; q < NR; ++q) {
            for (std::size_t t = p; t < k; ++t) bt[t - p] = b[q * ldb + t];
            acc[q][0] = kernels::fma(av, batch::load_aligned(bt.data()), acc[q][0]);
        }
    }
    PIPEPROP_UNROLL
    for (std::size_t q = 0; q < NR; ++q) {
        batch sum = acc[q][0];
        PIPEPROP_UNROLL
        for (std::size_t v = 1; v < u; ++v) sum += acc[q][v];
        const T s = alpha * reduce_add(sum);
        c[q] = beta != T(0) ? s + beta * c[q] : s;
    }
}

/// The last r (< 2 NR2) rows of B for simd_row_dots: blocks of NR2, NR2 / 2, ..., 1 rows (at most one each).
template <class T, std::size_t NR2>
inline void simd_row_dots_remainder(std::size_t r, std::size_t k, T alpha, const T* a, const T* b, std::size_t ldb,
                                    T beta, T* c) noexcept {
    if constexpr (NR2 >= 1) {
        if (r & NR2) {
            simd_row_dots<T, NR2>(k, alpha, a, b, ldb, beta, c);
            b += NR2 * ldb;
            c += NR2;
        }
        simd_row_dots_remainder<T, NR2 / 2>(r, k, alpha, a, b, ldb, beta, c);
    }
}

/// One row [N] of C = alpha op(A) B + beta C for K <= 2: the rank-1 / rank-2 updates of dense backward-p2 at b = 1, 2
/// (dW += dy x^T), memory bound on C, which is streamed once, 256 bytes per step, from the first vector-aligned
/// element of the row when the row has simd_long_row elements or more (the elements before it and after the last
/// whole vector one at a time). s0, s1: the row's elements of op(A) (op(A)(i, 0) and op(A)(i, 1); only the first k
/// are read). Every element is the same arithmetic, vector lane or scalar (std::fma rounds once, as kernels::fma
/// does), so the result does not depend on C's alignment: with alpha = beta = 1, fused multiply-adds over k starting
/// from c; otherwise fused multiply-adds from 0 over k, then alpha acc + beta c with one rounding (alpha acc when
/// beta == 0; C not read). K = 0 runs the scalar form only (C = beta C, no vector loop to compile). Called through
/// simd_rank_update_row (one call per row: with the loop over rows inside, GCC 12 compiled the unrolled loop a third
/// slower) or, for short rows, simd_rank_update_short_rows.
template <class T>
inline void simd_rank_update_row_body(std::size_t k, std::size_t n, T alpha, T s0, T s1, const T* __restrict b,
                                      std::size_t ldb, T beta, T* __restrict c) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const batch a0(s0), a1(s1), va(alpha), vb(beta);
    // Elements before the first vector-aligned one; not worth it for short rows (dense -> 10 outputs: n = 64, 128).
    const std::size_t head =
        n >= simd_long_row<T> ? (w - reinterpret_cast<std::uintptr_t>(c) / sizeof(T) % w) % w : std::size_t(0);
    // Mode 2, accumulate (alpha = beta = 1, what dense backward-p2 calls): C's element starts the chain,
    // c = fma(a1, b1, fma(a0, b0, c)), one arithmetic operation per multiply-add (AVX2 is bound by their count here,
    // not by memory). Mode 1: the general form, C read. Mode 0: beta == 0, C not read.
    const auto run = [&]<std::size_t K, int Mode>() {
        const auto scalar = [&](std::size_t j) {
            T acc = T(0);
            if constexpr (Mode == 2) acc = c[j];
            if constexpr (K > 0) acc = std::fma(s0, b[j], acc);
            if constexpr (K > 1) acc = std::fma(s1, b[ldb + j], acc);
            if constexpr (Mode == 2)
                c[j] = acc;
            else if constexpr (Mode == 1)
                c[j] = std::fma(alpha, acc, beta * c[j]);
            else
                c[j] = alpha * acc;
        };
        if constexpr (K == 0) {
            for (std::size_t j = 0; j < n; ++j) scalar(j);
        } else {
            const auto vector = [&](std::size_t j) {
                batch acc(T(0));
                if constexpr (Mode == 2) acc = batch::load_unaligned(c + j);
                acc = kernels::fma(a0, batch::load_unaligned(b + j), acc);
                if constexpr (K > 1) acc = kernels::fma(a1, batch::load_unaligned(b + ldb + j), acc);
                if constexpr (Mode == 2)
                    acc.store_unaligned(c + j);
                else if constexpr (Mode == 1)
                    kernels::fma(va, acc, vb * batch::load_unaligned(c + j)).store_unaligned(c + j);
                else
                    (va * acc).store_unaligned(c + j);
            };
            std::size_t j = 0;
            for (; j < head; ++j) scalar(j);
            constexpr std::size_t unroll = 256 / sizeof(batch) > 0 ? 256 / sizeof(batch) : 1;  // 256 bytes per step
            for (; j + unroll * w <= n; j += unroll * w)
                for (std::size_t u = 0; u < unroll; ++u) vector(j + u * w);
            for (; j + w <= n; j += w) vector(j);
            for (; j < n; ++j) scalar(j);
        }
    };
    const int mode = beta == T(0) ? 0 : alpha == T(1) && beta == T(1) ? 2 : 1;
    [&]<std::size_t... K>(std::index_sequence<K...>) {
        ((k == K ? (mode == 0   ? run.template operator()<K, 0>()
                    : mode == 1 ? run.template operator()<K, 1>()
                                : run.template operator()<K, 2>())
                 : void()),
         ...);
    }(std::make_index_sequence<3>{});
}

/// simd_rank_update_row_body for one row, a function of its own (see there).
template <class T>
PIPEPROP_REGISTER_KERNEL
inline void simd_rank_update_row(std::size_t k, std::size_t n, T alpha, T s0, T s1, const T* b,
                                 std::size_t ldb, T beta, T* c) noexcept {
    simd_rank_update_row_body<T>(k, n, alpha, s0, s1, b, ldb, beta, c);
}

/// The elements op(A)(i, 0), op(A)(i, 1) of row i that a rank-k update (k <= 2) reads (0 beyond k): A stored
/// [K x M] when TransA (op(A)(i, p) = a[p lda + i]), else [M x K] (a[i lda + p]).
template <bool TransA, class T>
[[nodiscard]] inline std::array<T, 2> rank_update_scalars(std::size_t k, const T* a, std::size_t lda,
                                                          std::size_t i) noexcept {
    const T* ai = TransA ? a + i : a + i * lda;
    return {k > 0 ? ai[0] : T(0), k > 1 ? (TransA ? ai[lda] : ai[1]) : T(0)};
}

/// simd_rank_update_row_body for rows i < m of C (row stride ldc; op(A)(i, p) = a[i a_row + p a_col]) in one call:
/// for short rows (a dense layer to 10 outputs, rows of 64 or 128), where a call per row costs as much as the row.
template <class T>
PIPEPROP_REGISTER_KERNEL
inline void simd_rank_update_short_rows(std::size_t m, std::size_t n, std::size_t k, T alpha,
                                        const T* a, std::size_t a_row, std::size_t a_col,
                                        const T* b, std::size_t ldb, T beta, T* c,
                                        std::size_t ldc) noexcept {
    for (std::size_t i = 0; i < m; ++i) {
        const T* ai = a + i * a_row;
        simd_rank_update_row_body<T>(k, n, alpha, k > 0 ? ai[0] : T(0), k > 1 ? ai[a_col] : T(0), b, ldb, beta,
                                     c + i * ldc);
    }
}

}  // namespace pipeprop::kernels::detail
