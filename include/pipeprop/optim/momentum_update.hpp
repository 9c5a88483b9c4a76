// pipeprop/optim/momentum_update.hpp: the one momentum-SGD update kernel that every optimizer variant in pipeprop
// (heavy-ball, Nesterov, spike compensation) is a coefficient choice of.
//
// docs/pb-semantics.md §2-3 (PyTorch heavy-ball convention; PB-paper, Kosson et al. arXiv 2003.11666, §4 for
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
#include <type_traits>

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

namespace detail {
// The update of one element or one vector of elements (see the file comment): every function below runs exactly this
// arithmetic, so they agree bit for bit.
template <class B, class S>
inline void momentum_element(B& w, B& v, const B& gl, const S& m, const S& wd, const S& lr, const S& a, const S& bl,
                             const S& bd) noexcept {
    if constexpr (std::is_floating_point_v<B>) {
        v = std::fma(m, v, std::fma(wd, w, gl));
        const B step = std::fma(a, v, std::fma(bl, gl, bd * w));
        w = std::fma(-lr, step, w);
    } else {
        v = kernels::fma(m, v, kernels::fma(wd, w, gl));
        const B step = kernels::fma(a, v, kernels::fma(bl, gl, bd * w));
        w = kernels::fnma(lr, step, w);
    }
}
}  // namespace detail

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
        batch wi = batch::load_unaligned(w + i), vi = batch::load_unaligned(v + i);
        detail::momentum_element(wi, vi, batch::load_unaligned(g_loss + i), m, wd, lr, a, bl, bd);
        vi.store_unaligned(v + i);
        wi.store_unaligned(w + i);
    }
    const T bds = c.b_decay * c.weight_decay;
    for (; i < n; ++i)
        detail::momentum_element(w[i], v[i], g_loss[i], c.momentum, c.weight_decay, c.learning_rate, c.a, c.b_loss,
                                 bds);
}

/// momentum_update of a rows x cols block w, v (row-major) whose loss gradient is the outer product of one sample,
/// g_loss[r cols + j] = 0 + dy[r] x[j], never stored: backward-p2 of a dense layer at b = 1 fused into the update
/// (one pass over w and v instead of writing, reading and zeroing a gradient). Each element of
/// g_loss is formed as a backward-p2 into a zeroed gradient forms it (one rounding; a zero product gives +0), so the
/// result equals backward-p2 followed by momentum_update bit for bit. No allocation, no exceptions.
template <class T>
void momentum_update_outer(std::size_t rows, std::size_t cols, T* w, T* v, const T* dy, const T* x,
                           const update_coefficients<T>& c) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t width = batch::size;
    const batch m(c.momentum), wd(c.weight_decay), lr(c.learning_rate), a(c.a), bl(c.b_loss),
        bd(c.b_decay * c.weight_decay), zero(T(0));
    const T bds = c.b_decay * c.weight_decay;
    for (std::size_t r = 0; r < rows; ++r) {
        T* wr = w + r * cols;
        T* vr = v + r * cols;
        const T d = dy[r];
        const batch db(d);
        const std::size_t vector_end = cols - cols % width;
        for (std::size_t j = 0; j < vector_end; j += width) {
            batch wi = batch::load_unaligned(wr + j), vi = batch::load_unaligned(vr + j);
            detail::momentum_element(wi, vi, kernels::fma(db, batch::load_unaligned(x + j), zero), m, wd, lr, a, bl,
                                     bd);
            vi.store_unaligned(vr + j);
            wi.store_unaligned(wr + j);
        }
        for (std::size_t j = vector_end; j < cols; ++j)
            detail::momentum_element(wr[j], vr[j], std::fma(d, x[j], T(0)), c.momentum, c.weight_decay,
                                     c.learning_rate, c.a, c.b_loss, bds);
    }
}

}  // namespace pipeprop::optim
