// pipeprop/kernels/strided_sums.hpp: K reductions of equal length at once, over the arrays x + j stride
// (j < K), each summed in exactly the order of its one-array kernel in kernels/elementwise.hpp (sum and
// centered_square_sum are the K = 1 case; centered_dot), so the results are bitwise those of K separate calls (with
// -ffp-contract=off, as the library requires for bit-identical results; a NaN result may carry another sign or
// payload, as between any two compilations of the same sum, since the compiler may swap an addition's operands).
//
// Why: each one-array reduction is a single chain of dependent vector additions, so it runs at one vector per
// addition latency (3-4 cycles) however fast the loads are. K independent chains in one loop fill that latency:
// the normalization layers reduce over several groups or channels of the same size, and call these with K = 4.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstddef>

#include "pipeprop/kernels/fma.hpp"

namespace pipeprop::kernels {

/// The number of single-array reductions the normalization layers run at once (four chains cover the latency of a
/// vector addition at two loads per cycle).
inline constexpr std::size_t strided_chains = 4;

/// The number of (sum, centered dot) pairs the normalization layers' backward passes run at once: one pair is
/// already two chains over three loads per vector; with 512-bit vectors that keeps up with the loads (more pairs
/// were slower in the group-norm benchmark: their longer epilogue), with narrower vectors four pairs are faster.
template <class T>
inline constexpr std::size_t strided_pair_chains = sizeof(T) * xsimd::batch<T>::size >= 64 ? 1 : 4;

/// Splits [0, Count) into chunks for the strided kernels: calls f.template operator()<K>(first) for
/// first = 0, K, 2 K, ... while a whole chunk fits, then f.template operator()<1>(first) for each index left.
template <std::size_t K, std::size_t Count, class F>
void for_each_chunk(F&& f) {
    static_assert(K >= 1, "pipeprop::kernels::for_each_chunk: a chunk holds at least one index.");
    for (std::size_t first = 0; first + K <= Count; first += K) f.template operator()<K>(first);
    if constexpr (Count % K != 0)
        for (std::size_t first = Count - Count % K; first < Count; ++first) f.template operator()<1>(first);
}

// GCC 12 reports the pass-through operand of its own AVX-512 extract intrinsics (inside xsimd::hadd for double) as
// an uninitialized __Y where they are inlined here; the false warnings are silenced for these kernels only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
/// out[j] = sum(n, x + j stride) for j < K, bitwise as K calls of kernels::sum. x: K arrays of n values, stride
/// apart (they may overlap; nothing is written to them). out: K values.
template <std::size_t K, class T>
[[gnu::always_inline]] inline void strided_sums(std::size_t n, const T* x, std::size_t stride, T* out) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    batch acc[K];
    for (std::size_t j = 0; j < K; ++j) acc[j] = batch(T(0));
    const std::size_t vector_end = n - n % w;
    for (std::size_t i = 0; i < vector_end; i += w)
        for (std::size_t j = 0; j < K; ++j) acc[j] += batch::load_unaligned(x + j * stride + i);
    for (std::size_t j = 0; j < K; ++j) {
        const T* xj = x + j * stride;
        T s = vector_end == 0 ? T(0) : xsimd::hadd(acc[j]);  // +0 both ways below one vector
        for (std::size_t i = vector_end; i < n; ++i) s += xj[i];
        out[j] = s;
    }
}

/// out[j] = centered_square_sum(n, x + j stride, mean[j]) for j < K, bitwise as K calls of
/// kernels::centered_square_sum. mean, out: K values.
template <std::size_t K, class T>
[[gnu::always_inline]] inline void strided_centered_square_sums(std::size_t n, const T* x, std::size_t stride,
                                                                const T* mean, T* out) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    batch acc[K];
    batch vm[K];
    for (std::size_t j = 0; j < K; ++j) {
        acc[j] = batch(T(0));
        vm[j] = batch(mean[j]);
    }
    const std::size_t vector_end = n - n % w;
    for (std::size_t i = 0; i < vector_end; i += w)
        for (std::size_t j = 0; j < K; ++j) {
            const batch d = batch::load_unaligned(x + j * stride + i) - vm[j];
            acc[j] = kernels::fma(d, d, acc[j]);
        }
    for (std::size_t j = 0; j < K; ++j) {
        const T* xj = x + j * stride;
        T s = vector_end == 0 ? T(0) : xsimd::hadd(acc[j]);  // +0 both ways below one vector
        for (std::size_t i = vector_end; i < n; ++i) s += (xj[i] - mean[j]) * (xj[i] - mean[j]);
        out[j] = s;
    }
}

/// For j < K, with dy_j = dy + j stride and x_j = x + j stride: sums[j] = sum(n, dy_j) and
/// dots[j] = centered_dot(n, dy_j, x_j, mean), bitwise as 2 K calls of kernels::sum / kernels::centered_dot (one
/// mean for all K). sums, dots: K values.
template <std::size_t K, class T>
void strided_sums_and_centered_dots(std::size_t n, const T* dy, const T* x, std::size_t stride, T mean, T* sums,
                                    T* dots) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const batch vm(mean);
    batch s[K];
    batch d[K];
    for (std::size_t j = 0; j < K; ++j) s[j] = d[j] = batch(T(0));
    const std::size_t vector_end = n - n % w;
    for (std::size_t i = 0; i < vector_end; i += w)
        for (std::size_t j = 0; j < K; ++j) {
            const batch g = batch::load_unaligned(dy + j * stride + i);
            s[j] += g;
            d[j] = kernels::fma(g, batch::load_unaligned(x + j * stride + i) - vm, d[j]);
        }
    for (std::size_t j = 0; j < K; ++j) {
        const T* dyj = dy + j * stride;
        const T* xj = x + j * stride;
        T sj = vector_end == 0 ? T(0) : xsimd::hadd(s[j]);
        T dj = vector_end == 0 ? T(0) : xsimd::hadd(d[j]);
        for (std::size_t i = vector_end; i < n; ++i) sj += dyj[i];
        for (std::size_t i = vector_end; i < n; ++i) dj += dyj[i] * (xj[i] - mean);
        sums[j] = sj;
        dots[j] = dj;
    }
}

/// strided_sums_and_centered_dots for a length N known at compile time. Below one vector the same sums come from a
/// scalar loop in the caller (bitwise equal: the vector kernel starts from +0 and adds every value in order in its
/// tail), so a spatial extent of a few values (group norm over dense features) pays no call and no horizontal sum.
template <std::size_t N, std::size_t K, class T>
[[gnu::always_inline]] inline void fixed_sums_and_centered_dots(const T* dy, const T* x, std::size_t stride, T mean,
                                                                T* sums, T* dots) noexcept {
    if constexpr (N < xsimd::batch<T>::size) {
        for (std::size_t j = 0; j < K; ++j) {
            const T* dyj = dy + j * stride;
            const T* xj = x + j * stride;
            T sj = T(0);
            T dj = T(0);
            for (std::size_t i = 0; i < N; ++i) sj += dyj[i];
            for (std::size_t i = 0; i < N; ++i) dj += dyj[i] * (xj[i] - mean);
            sums[j] = sj;
            dots[j] = dj;
        }
    } else {
        strided_sums_and_centered_dots<K>(N, dy, x, stride, mean, sums, dots);
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace pipeprop::kernels
