// pipeprop/kernels/fma.hpp: fused multiply-add on xsimd batches that is fused on every architecture.
//
// Bit-identity across executors and stage cuts needs x * y + z rounded once, everywhere: in a kernel's vector body,
// in its scalar tail (std::fma) and whatever compiler flags are used. xsimd 8.1 (Debian 12) has a fused xsimd::fma /
// xsimd::fnma only for its FMA3 and FMA4 architectures (fma3<sse4_2>, fma3<avx>, fma3<avx2>, fma4: x86-64 with -mfma,
// e.g. -march=x86-64-v3 or -march=native on any x86-64 CPU since 2013). Elsewhere it falls back to the generic
// `x * y + z`, rounded twice under -ffp-contract=off, so a vector body and a std::fma tail disagree:
//   - AVX-512 (avx512f and up): these helpers call the AVX-512 FMA instruction directly (a gap in that xsimd version;
//     the only other intrinsics in pipeprop are kernels/transpose_add.hpp's register transposes);
//   - every other architecture (x86-64 without FMA: baseline, -march=x86-64-v2, SSE2..SSE4.2, AVX without FMA; ARM
//     NEON, where xsimd 8.1 fuses fma only for some types and never fnma): lane-wise std::fma, the correctly rounded
//     C library fma that the scalar tails call as well. Same bits as a fused instruction, but each lane is a library
//     call (software FMA on a CPU without one), so vector kernels are much slower there: build with FMA for speed.
// tests/hardening.cmake builds the executor bit-identity tests for -march=x86-64-v2 (test_*_baseline) to keep this
// true; with the generic fallback, test_sync_executor_baseline failed 16 checks (sync m = 1 vs the sequential
// trainer, float and double).
#pragma once

#include <xsimd/xsimd.hpp>

#include <cmath>
#include <cstddef>
#include <type_traits>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace pipeprop::kernels {

namespace detail {
/// True when xsimd::fma / xsimd::fnma on batches of architecture A compile to a fused instruction.
template <class A>
inline constexpr bool xsimd_fma_is_fused =
    std::is_base_of_v<xsimd::fma3<xsimd::sse4_2>, A> || std::is_base_of_v<xsimd::fma3<xsimd::avx>, A> ||
    std::is_base_of_v<xsimd::fma3<xsimd::avx2>, A> || std::is_base_of_v<xsimd::fma4, A>;

/// x * y + z lane by lane with std::fma (one rounding per lane).
template <class T, class A>
[[nodiscard]] inline xsimd::batch<T, A> lanewise_fma(const xsimd::batch<T, A>& x, const xsimd::batch<T, A>& y,
                                                     const xsimd::batch<T, A>& z) noexcept {
    constexpr std::size_t n = xsimd::batch<T, A>::size;
    T a[n], b[n], c[n];
    x.store_unaligned(a);
    y.store_unaligned(b);
    z.store_unaligned(c);
    for (std::size_t i = 0; i < n; ++i) a[i] = std::fma(a[i], b[i], c[i]);
    return xsimd::batch<T, A>::load_unaligned(a);
}
}  // namespace detail

/// x * y + z with a single rounding, lane-wise.
template <class T, class A>
[[nodiscard]] inline xsimd::batch<T, A> fma(const xsimd::batch<T, A>& x, const xsimd::batch<T, A>& y,
                                            const xsimd::batch<T, A>& z) noexcept {
#if defined(__AVX512F__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, A>) {
        if constexpr (std::is_same_v<T, float>)
            return _mm512_fmadd_ps(x, y, z);
        else if constexpr (std::is_same_v<T, double>)
            return _mm512_fmadd_pd(x, y, z);
    }
#endif
    if constexpr (detail::xsimd_fma_is_fused<A>)
        return xsimd::fma(x, y, z);
    else
        return detail::lanewise_fma(x, y, z);
}

/// z - x * y with a single rounding, lane-wise.
template <class T, class A>
[[nodiscard]] inline xsimd::batch<T, A> fnma(const xsimd::batch<T, A>& x, const xsimd::batch<T, A>& y,
                                             const xsimd::batch<T, A>& z) noexcept {
#if defined(__AVX512F__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, A>) {
        if constexpr (std::is_same_v<T, float>)
            return _mm512_fnmadd_ps(x, y, z);
        else if constexpr (std::is_same_v<T, double>)
            return _mm512_fnmadd_pd(x, y, z);
    }
#endif
    if constexpr (detail::xsimd_fma_is_fused<A>)
        return xsimd::fnma(x, y, z);
    else
        return detail::lanewise_fma(-x, y, z);  // z - x * y == (-x) * y + z exactly: negation does not round
}

}  // namespace pipeprop::kernels
