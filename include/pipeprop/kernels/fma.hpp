// pipeprop/kernels/fma.hpp: fused multiply-add on xsimd batches that is fused on every architecture.
//
// Bit-identity across executors and stage cuts needs x * y + z rounded once, everywhere: in a kernel's vector body,
// in its scalar tail (std::fma) and whatever compiler flags are used. xsimd 8.1 (Debian 12) has native FMA for
// SSE/AVX/AVX2 with FMA3, but on AVX-512 its xsimd::fma falls back to the generic `x * y + z`, which is rounded twice
// under -ffp-contract=off (and fused or not at the compiler's whim otherwise). These helpers call the AVX-512 FMA
// instruction directly for AVX-512 batches (the one place pipeprop uses intrinsics: a gap in that xsimd version)
// and xsimd::fma / xsimd::fnma elsewhere.
#pragma once

#include <xsimd/xsimd.hpp>

#include <type_traits>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace pipeprop::kernels {

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
    return xsimd::fma(x, y, z);
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
    return xsimd::fnma(x, y, z);
}

}  // namespace pipeprop::kernels
