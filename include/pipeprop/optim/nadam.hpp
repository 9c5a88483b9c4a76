// pipeprop/optim/nadam.hpp: NAdam with decoupled weight decay (NAdamW) over one parameter block: the per-step
// scalars and the element-wise update kernel. The state (first moment m, second moment v) is AdamW's layout
// (optim/adamw.hpp); the momentum schedule's running product is one double the caller keeps.
//
// Dozat, "Incorporating Nesterov Momentum into Adam", ICLR 2016 workshop, in the form of torch.optim.NAdam with
// decoupled_weight_decay = True (the update arXiv 2505.01099 §5 trains with). Step t = 1, 2, ..., psi the momentum
// decay (torch's default 0.004):
//     mu_t = beta1 (1 - 0.5 * 0.96^(t psi)),   P_t = mu_1 mu_2 ... mu_t
//     w <- w (1 - lr lambda)                                      (decoupled weight decay)
//     m <- beta1 m + (1 - beta1) g ;  v <- beta2 v + (1 - beta2) g^2
//     d  = sqrt(v) / sqrt(1 - beta2^t) + eps
//     w <- w - lr (1 - mu_t) / (1 - P_t) g / d - lr mu_(t+1) / (1 - P_t mu_(t+1)) m / d
// The scalars are computed in double and rounded to T; the kernel's arithmetic is element-wise and the same in its
// xsimd body and its scalar tail, so a result does not depend on how the block is split.
#pragma once

#include <xsimd/xsimd.hpp>

#include "pipeprop/kernels/fma.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

namespace pipeprop::optim {

/// Per-step scalars of one NAdamW update (see the file comment), in the parameters' type T, and the running
/// product P_t after this step (double; the caller keeps it for the next step).
template <class T>
struct nadam_coefficients {
    T decay = T(1);             ///< 1 - lr lambda
    T beta1 = T(0.9);              ///< beta1, the first moment's decay
    T one_minus_beta1 = T(0.1);    ///< 1 - beta1
    T beta2 = T(0.999);            ///< beta2, the second moment's decay
    T one_minus_beta2 = T(0.001);  ///< 1 - beta2
    T gradient_step = T(0);     ///< lr (1 - mu_t) / (1 - P_t): weight of g / d
    T moment_step = T(0);       ///< lr mu_(t+1) / (1 - P_t mu_(t+1)): weight of m / d
    T sqrt_correction2 = T(1);  ///< sqrt(1 - beta2^t)
    T eps = T(1e-8);            ///< eps added to sqrt(v hat)
    double mu_product = 1.0;    ///< P_t
};

/// mu_t = beta1 (1 - 0.5 * 0.96^(t psi)), the momentum of step t (dimensionless).
[[nodiscard]] inline double nadam_momentum(double beta1, double momentum_decay, std::uint64_t t) noexcept {
    return beta1 * (1.0 - 0.5 * std::pow(0.96, static_cast<double>(t) * momentum_decay));
}

/// P_t = mu_1 ... mu_t, multiplied in step order (the same bits as a product kept step by step); 1 for t = 0.
[[nodiscard]] inline double nadam_momentum_product(double beta1, double momentum_decay, std::uint64_t t) noexcept {
    double p = 1.0;
    for (std::uint64_t i = 1; i <= t; ++i) p *= nadam_momentum(beta1, momentum_decay, i);
    return p;
}

/// Coefficients of step t (t >= 1) with learning rate lr, decoupled weight decay lambda, betas, eps, momentum decay
/// psi and the product P_(t-1) of the steps before. Throws std::invalid_argument when t == 0.
template <class T>
[[nodiscard]] nadam_coefficients<T> nadam_step_coefficients(double lr, double weight_decay, double beta1, double beta2,
                                                            double eps, double momentum_decay, std::uint64_t t,
                                                            double prior_product) {
    if (t == 0)
        throw std::invalid_argument("pipeprop::optim::nadam_step_coefficients: the step count t starts at 1");
    const double mu = nadam_momentum(beta1, momentum_decay, t), mu_next = nadam_momentum(beta1, momentum_decay, t + 1);
    const double product = prior_product * mu;
    nadam_coefficients<T> c;
    c.decay = static_cast<T>(1.0 - lr * weight_decay);
    c.beta1 = static_cast<T>(beta1);
    c.one_minus_beta1 = static_cast<T>(1.0 - beta1);
    c.beta2 = static_cast<T>(beta2);
    c.one_minus_beta2 = static_cast<T>(1.0 - beta2);
    c.gradient_step = static_cast<T>(lr * (1.0 - mu) / (1.0 - product));
    c.moment_step = static_cast<T>(lr * mu_next / (1.0 - product * mu_next));
    c.sqrt_correction2 = static_cast<T>(std::sqrt(1.0 - std::pow(beta2, static_cast<double>(t))));
    c.eps = static_cast<T>(eps);
    c.mu_product = product;
    return c;
}

/// Applies one NAdamW update to n parameters in place: w [n], m [n], v [n], gradient g [n] (of the mean loss, read
/// only). No allocation, no exceptions.
template <class T>
void nadam_update(std::size_t n, T* w, T* m, T* v, const T* g, const nadam_coefficients<T>& c) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t width = batch::size;
    const batch decay(c.decay), b1(c.beta1), omb1(c.one_minus_beta1), b2(c.beta2), omb2(c.one_minus_beta2),
        gs(c.gradient_step), ms(c.moment_step), sc2(c.sqrt_correction2), eps(c.eps);
    std::size_t i = 0;
    for (; i + width <= n; i += width) {
        const batch gi = batch::load_unaligned(g + i);
        const batch wi = batch::load_unaligned(w + i) * decay;
        const batch mi = kernels::fma(b1, batch::load_unaligned(m + i), omb1 * gi);
        const batch vi = kernels::fma(b2, batch::load_unaligned(v + i), (omb2 * gi) * gi);
        mi.store_unaligned(m + i);
        vi.store_unaligned(v + i);
        const batch denom = xsimd::sqrt(vi) / sc2 + eps;
        kernels::fnma(ms, mi / denom, kernels::fnma(gs, gi / denom, wi)).store_unaligned(w + i);
    }
    for (; i < n; ++i) {
        const T gi = g[i];
        const T wi = w[i] * c.decay;
        const T mi = std::fma(c.beta1, m[i], c.one_minus_beta1 * gi);
        const T vi = std::fma(c.beta2, v[i], (c.one_minus_beta2 * gi) * gi);
        m[i] = mi;
        v[i] = vi;
        const T denom = std::sqrt(vi) / c.sqrt_correction2 + c.eps;
        w[i] = std::fma(-c.moment_step, mi / denom, std::fma(-c.gradient_step, gi / denom, wi));
    }
}

}  // namespace pipeprop::optim
