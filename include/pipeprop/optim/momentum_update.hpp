// pipeprop/optim/momentum_update.hpp: the one momentum-SGD update kernel that every optimizer variant in pipeprop
// (heavy-ball, Nesterov, spike compensation) is a coefficient choice of.
//
// shared/docs/pb-semantics.md §2-3 (PyTorch heavy-ball convention; PB-paper, Kosson et al. arXiv 2003.11666, §4 for
// spike compensation):
//     g = g_loss + lambda * w                      (L2 weight decay from the current weights: never delayed)
//     v <- m v + g
//     w <- w - eta (a v + b_loss g_loss + b_decay lambda w_old)
// heavy-ball:          a = 1,   b_loss = 0,                b_decay = 0
// Nesterov (PyTorch):  a = m,   b_loss = 1,                b_decay = 1
// spike compensation:  a = m^D, b_loss = (1 - m^D)/(1 - m), b_decay = 0   (D = the stage's gradient delay)
#pragma once

#include <xsimd/xsimd.hpp>

#include "pipeprop/kernels/fma.hpp"

#include <cmath>
#include <cstddef>

namespace pipeprop::optim {

/// Coefficients of one update (see the file comment). Units: eta per sample-mean gradient; all dimensionless.
template <class T>
struct update_coefficients {
    T learning_rate = T(0);  ///< eta
    T momentum = T(0);       ///< m
    T weight_decay = T(0);   ///< lambda (L2, added to the gradient)
    T a = T(1);              ///< weight of the velocity in the step
    T b_loss = T(0);         ///< weight of the fresh loss gradient in the step (the "spike")
    T b_decay = T(0);        ///< weight of the fresh weight-decay gradient in the step
};

/// Heavy-ball coefficients.
template <class T>
constexpr update_coefficients<T> heavy_ball(T lr, T m, T wd) noexcept {
    return {lr, m, wd, T(1), T(0), T(0)};
}
/// Nesterov coefficients (PyTorch's formulation).
template <class T>
constexpr update_coefficients<T> nesterov(T lr, T m, T wd) noexcept {
    return {lr, m, wd, m, T(1), T(1)};
}

/// Spike-compensation coefficients a = m^D, b = (1 - m^D) / (1 - m) for delay D (b = D when m = 1; D = 0 gives
/// heavy-ball, D = 1 gives a = m, b = 1). constexpr, so a compile-time momentum gives compile-time coefficients.
template <class T>
constexpr update_coefficients<T> spike_compensation(T lr, T m, T wd, std::size_t delay) noexcept {
    T md = T(1);
    for (std::size_t i = 0; i < delay; ++i) md *= m;
    const T b = (m == T(1)) ? static_cast<T>(delay) : (T(1) - md) / (T(1) - m);
    return {lr, m, wd, md, b, T(0)};
}

/// Applies one update to n parameters in place: w [n], v [n] (velocity), g_loss [n] (loss gradient, read only).
/// Element-wise, so the result does not depend on n's split into calls. No allocation, no exceptions.
template <class T>
void momentum_update(std::size_t n, T* w, T* v, const T* g_loss, const update_coefficients<T>& c) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t width = batch::size;
    const batch m(c.momentum), wd(c.weight_decay), lr(c.learning_rate), a(c.a), bl(c.b_loss),
        bd(c.b_decay * c.weight_decay);
    std::size_t i = 0;
    for (; i + width <= n; i += width) {
        const batch wi = batch::load_unaligned(w + i);
        const batch gl = batch::load_unaligned(g_loss + i);
        const batch vi = kernels::fma(m, batch::load_unaligned(v + i), kernels::fma(wd, wi, gl));
        vi.store_unaligned(v + i);
        const batch step = kernels::fma(a, vi, kernels::fma(bl, gl, bd * wi));
        kernels::fnma(lr, step, wi).store_unaligned(w + i);
    }
    for (; i < n; ++i) {
        const T wi = w[i];
        const T gl = g_loss[i];
        const T vi = std::fma(c.momentum, v[i], std::fma(c.weight_decay, wi, gl));
        v[i] = vi;
        const T step = std::fma(c.a, vi, std::fma(c.b_loss, gl, c.b_decay * c.weight_decay * wi));
        w[i] = std::fma(-c.learning_rate, step, wi);
    }
}

}  // namespace pipeprop::optim
