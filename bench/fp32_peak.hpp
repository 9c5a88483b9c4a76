// bench/fp32_peak.hpp: the fp32 peak of one core for the compiled SIMD architecture, measured.
//
// A loop of independent fused multiply-adds (acc = acc * a + b) over xsimd batches: 16 chains with 64-byte vectors,
// 12 otherwise, more than FMA latency x FMA units on the x86-64 cores of 2013-2024, so the loop runs at the FMA
// throughput. 2 FLOP per lane per FMA. Used by bench/roofline.cpp (the step against the peak) and by
// bench/side_by_side_train.cpp --peak (what the side-by-side targets ask of this core, bench/ratios.py).
#pragma once

#include <xsimd/xsimd.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>

#include "pipeprop/kernels/fma.hpp"
#include "pipeprop/kernels/unroll.hpp"

namespace pipeprop::bench {

/// One run of N independent chains of fused multiply-adds over batches of T, `iterations` per chain; GFLOP/s
/// (wall clock).
template <class T, std::size_t N>
double fma_loop_gflops(std::size_t iterations) {
    using batch = xsimd::batch<T>;
    std::array<batch, N> acc;
    PIPEPROP_UNROLL
    for (std::size_t i = 0; i < N; ++i) acc[i] = batch(T(i) * T(1e-3));
    const batch a(T(0.999999)), b(T(1e-7));
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t it = 0; it < iterations; ++it)
        PIPEPROP_UNROLL
        for (std::size_t i = 0; i < N; ++i) acc[i] = pipeprop::kernels::fma(acc[i], a, b);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    batch sum = acc[0];
    for (std::size_t i = 1; i < N; ++i) sum += acc[i];
    volatile T sink = xsimd::hadd(sum);
    (void)sink;
    return 2.0 * double(batch::size) * double(N) * double(iterations) / s / 1e9;
}

/// fp32 peak of this core for the compiled architecture, GFLOP/s: best of `runs` FMA loops of about 0.05 s each
/// (the best, since other load on a shared core only lowers a run).
inline double measure_peak_gflops(int runs) {
    constexpr std::size_t chains = sizeof(xsimd::batch<float>) >= 64 ? 16 : 12;
    double best = 0;
    for (int r = 0; r < runs; ++r) best = std::max(best, fma_loop_gflops<float, chains>(4'000'000));
    return best;
}

}  // namespace pipeprop::bench
