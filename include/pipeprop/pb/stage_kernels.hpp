// pipeprop/pb/stage_kernels.hpp: the element-wise kernels of the PB mitigation policies (docs/pb-semantics.md §3).
//
// Written once over xsimd batches with a scalar tail that performs the same single-rounding operations (the vector
// body uses pipeprop::kernels::fma / fnma, fused on every architecture, the tail std::fma), so a result does not
// depend on where an element falls. Every function: n elements, raw pointers, no allocation, no exceptions; output
// arrays may alias no input unless stated.
#pragma once

#include <xsimd/xsimd.hpp>

#include "pipeprop/kernels/fma.hpp"

#include "pipeprop/kernels/fma.hpp"

#include <cmath>
#include <cstddef>

namespace pipeprop::pb::kernels {

/// out = w - c v  (LWP velocity form, c = eta T; PipeMare correction, c = D, v = delta).
template <class T>
void subtract_scaled(std::size_t n, const T* w, const T* v, T c, T* out) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t width = batch::size;
    const batch cb(c);
    std::size_t i = 0;
    for (; i + width <= n; i += width)
        pipeprop::kernels::fnma(cb, batch::load_unaligned(v + i), batch::load_unaligned(w + i))
            .store_unaligned(out + i);
    for (; i < n; ++i) out[i] = std::fma(-c, v[i], w[i]);
}

/// out = w + c d  (LWP weight-difference form, c = T, d = w(k) - w(k-1)).
template <class T>
void add_scaled(std::size_t n, const T* w, const T* d, T c, T* out) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t width = batch::size;
    const batch cb(c);
    std::size_t i = 0;
    for (; i + width <= n; i += width)
        pipeprop::kernels::fma(cb, batch::load_unaligned(d + i), batch::load_unaligned(w + i)).store_unaligned(out + i);
    for (; i < n; ++i) out[i] = std::fma(c, d[i], w[i]);
}

/// d = w_new - w_old  (the weight step of one update).
template <class T>
void difference(std::size_t n, const T* w_new, const T* w_old, T* d) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t width = batch::size;
    std::size_t i = 0;
    for (; i + width <= n; i += width)
        (batch::load_unaligned(w_new + i) - batch::load_unaligned(w_old + i)).store_unaligned(d + i);
    for (; i < n; ++i) d[i] = w_new[i] - w_old[i];
}

/// delta = gamma delta + (1 - gamma) (w_new - w_old)  (PipeMare's EMA of weight steps); one_minus_gamma is passed
/// so the caller fixes its rounding once.
template <class T>
void ema_of_step(std::size_t n, const T* w_new, const T* w_old, T gamma, T one_minus_gamma, T* delta) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t width = batch::size;
    const batch g(gamma), og(one_minus_gamma);
    std::size_t i = 0;
    for (; i + width <= n; i += width) {
        const batch step = batch::load_unaligned(w_new + i) - batch::load_unaligned(w_old + i);
        pipeprop::kernels::fma(g, batch::load_unaligned(delta + i), og * step).store_unaligned(delta + i);
    }
    for (; i < n; ++i) delta[i] = std::fma(gamma, delta[i], one_minus_gamma * (w_new[i] - w_old[i]));
}

}  // namespace pipeprop::pb::kernels
