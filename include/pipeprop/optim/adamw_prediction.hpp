// pipeprop/optim/adamw_prediction.hpp: the weights AdamW would reach T steps ahead if its current step repeated,
// the optimizer-aware weight prediction of PipeOptim (Guan et al., arXiv 2312.00839, its method section: w_hat =
// w - lr T delta, delta the optimizer's own update direction) for AdamW.
//
// With the state after t >= 1 steps (m, v, bias corrections of step t), the learning rate lr and decoupled weight
// decay lambda of the most recent step:
//     delta = m_hat / (sqrt(v_hat) + eps) + lambda w,   m_hat = m / (1 - beta1^t), v_hat = v / (1 - beta2^t)
//     w_hat = w - lr T delta  = w (1 - T lr lambda) - (T lr / (1 - beta1^t)) m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// evaluated in the second form (scalars in double, rounded to T), element-wise with the same arithmetic in the
// xsimd body and the scalar tail. docs/pb-semantics.md §3.
#pragma once

#include <xsimd/xsimd.hpp>

#include "pipeprop/kernels/fma.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace pipeprop::optim {

/// Scalars of one AdamW prediction (see the file comment), in the parameters' type T.
template <class T>
struct adamw_prediction_coefficients {
    T shrink = T(1);            ///< 1 - T lr lambda
    T moment_step = T(0);       ///< T lr / (1 - beta1^t)
    T sqrt_correction2 = T(1);  ///< sqrt(1 - beta2^t)
    T eps = T(1e-8);            ///< eps added to sqrt(v hat)
};

/// Coefficients of the prediction `horizon` steps ahead from the state after t >= 1 steps, lr and lambda of step t.
template <class T>
[[nodiscard]] adamw_prediction_coefficients<T> adamw_prediction(double lr, double weight_decay, double beta1,
                                                                double beta2, double eps, std::uint64_t t,
                                                                double horizon) noexcept {
    const double td = static_cast<double>(t);
    adamw_prediction_coefficients<T> c;
    c.shrink = static_cast<T>(1.0 - horizon * lr * weight_decay);
    c.moment_step = static_cast<T>(horizon * lr / (1.0 - std::pow(beta1, td)));
    c.sqrt_correction2 = static_cast<T>(std::sqrt(1.0 - std::pow(beta2, td)));
    c.eps = static_cast<T>(eps);
    return c;
}

/// out [n] = the predicted weights from w [n], m [n], v [n] (see the file comment). out may not alias the inputs.
/// No allocation, no exceptions.
template <class T>
void adamw_predict(std::size_t n, const T* w, const T* m, const T* v, const adamw_prediction_coefficients<T>& c,
                   T* out) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t width = batch::size;
    const batch shrink(c.shrink), step(c.moment_step), sc2(c.sqrt_correction2), eps(c.eps);
    std::size_t i = 0;
    for (; i + width <= n; i += width) {
        const batch denom = xsimd::sqrt(batch::load_unaligned(v + i)) / sc2 + eps;
        kernels::fnma(step, batch::load_unaligned(m + i) / denom, batch::load_unaligned(w + i) * shrink)
            .store_unaligned(out + i);
    }
    for (; i < n; ++i) {
        const T denom = std::sqrt(v[i]) / c.sqrt_correction2 + c.eps;
        out[i] = std::fma(-c.moment_step, m[i] / denom, w[i] * c.shrink);
    }
}

}  // namespace pipeprop::optim
