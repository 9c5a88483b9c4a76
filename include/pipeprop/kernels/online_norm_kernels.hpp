// pipeprop/kernels/online_norm_kernels.hpp: the arithmetic of Online Normalization (layers/online_norm.hpp; Chiley
// et al., arXiv 1905.05894; docs/online-norm.md): the forward and backward-p1 kernels of one run of values
// (rank 3: one channel of one sample, n = H*W values, scalar statistics) and of one sample across its features
// (rank 1: every feature its own channel), the affine gradients, the activation clamp that keeps NaN visible, and the
// std::ratio helpers of the layer's decay and clamp parameters. xsimd bodies with scalar tails that perform the same
// operations, so the results do not depend on how the values are split.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ratio>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "pipeprop/kernels/elementwise.hpp"
#include "pipeprop/kernels/fma.hpp"

namespace pipeprop {

namespace detail {

template <class R>
struct is_std_ratio : std::false_type {};
template <std::intmax_t N, std::intmax_t D>
struct is_std_ratio<std::ratio<N, D>> : std::true_type {};

/// True when R is a std::ratio strictly between 0 and 1 (a decay factor).
template <class R>
inline constexpr bool is_decay_ratio = [] {
    if constexpr (is_std_ratio<R>::value)
        return R::num > 0 && R::num < R::den;
    else
        return false;
}();

/// True when R is a positive std::ratio (the clamp value).
template <class R>
inline constexpr bool is_positive_ratio = [] {
    if constexpr (is_std_ratio<R>::value)
        return R::num > 0;
    else
        return false;
}();

/// R as a double (0 when R is not a std::ratio; only used after the static_asserts fired or passed).
template <class R>
inline constexpr double ratio_value = [] {
    if constexpr (is_std_ratio<R>::value)
        return static_cast<double>(R::num) / static_cast<double>(R::den);
    else
        return 0.0;
}();

/// 1 - R computed as (den - num) / den, exact for a power-of-two denominator.
template <class R>
inline constexpr double one_minus_ratio_value = [] {
    if constexpr (is_std_ratio<R>::value)
        return static_cast<double>(R::den - R::num) / static_cast<double>(R::den);
    else
        return 0.0;
}();

/// clamp(z, -c, c) lane-wise; a NaN stays NaN (it is not hidden as +-c), so divergence is seen at the loss.
template <class B>
[[nodiscard]] inline B clamp_keep_nan(const B& z, const B& c) noexcept {
    return xsimd::select(z > c, c, xsimd::select(z < -c, -c, z));
}
template <class T>
[[nodiscard]] inline T clamp_keep_nan_scalar(T z, T c) noexcept {
    return z > c ? c : (z < -c ? -c : z);
}

// --- Rank-3 form: one channel of one sample is a contiguous run of n = H*W values; its statistics are scalars. ---

/// yhat[i] = (x[i] - mean) * rscale, y[i] = clamp(gamma * yhat[i] + beta, -c, c) for i < n.
template <class T>
void online_norm_run_forward(std::size_t n, const T* x, T mean, T rscale, T gamma, T beta, T c, T* yhat,
                             T* y) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const batch vm(mean), vr(rscale), vg(gamma), vb(beta), vc(c);
    const std::size_t vector_end = n - n % w;
    for (std::size_t i = 0; i < vector_end; i += w) {
        const batch yh = (batch::load_unaligned(x + i) - vm) * vr;
        yh.store_unaligned(yhat + i);
        clamp_keep_nan(kernels::fma(vg, yh, vb), vc).store_unaligned(y + i);
    }
    for (std::size_t i = vector_end; i < n; ++i) {
        const T yh = (x[i] - mean) * rscale;
        yhat[i] = yh;
        y[i] = clamp_keep_nan_scalar(std::fma(gamma, yh, beta), c);
    }
}

/// Eq. 11a on one run: dx[i] = (|y[i]| < c ? gamma dy[i] : 0) - cg * yhat[i], with cg = (1 - a_b) g_acc.
/// Returns sum_i dx[i] * yhat[i] (n times the spatial mean of eq. 11b).
template <class T>
[[nodiscard]] T online_norm_run_correct_y(std::size_t n, const T* y, const T* dy, const T* yhat, T gamma, T cg, T c,
                                          T* dx) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const batch vg(gamma), vcg(cg), vc(c), zero(T(0));
    const std::size_t vector_end = n - n % w;
    batch acc(T(0));
    for (std::size_t i = 0; i < vector_end; i += w) {
        const batch yh = batch::load_unaligned(yhat + i);
        const batch g =
            xsimd::select(xsimd::abs(batch::load_unaligned(y + i)) < vc, vg * batch::load_unaligned(dy + i), zero);
        const batch t = kernels::fnma(vcg, yh, g);
        t.store_unaligned(dx + i);
        acc = kernels::fma(t, yh, acc);
    }
    T s = xsimd::hadd(acc);
    for (std::size_t i = vector_end; i < n; ++i) {
        const T g = std::abs(y[i]) < c ? gamma * dy[i] : T(0);
        const T t = std::fma(-cg, yhat[i], g);
        dx[i] = t;
        s = std::fma(t, yhat[i], s);
    }
    return s;
}

/// Eq. 12a on one run: dx[i] = dx[i] * rscale - cu (dx holds t of eq. 11a), with cu = (1 - a_b) u.
/// Returns sum_i dx[i] (n times the spatial mean of eq. 12b).
template <class T>
[[nodiscard]] T online_norm_run_correct_mean(std::size_t n, T rscale, T cu, T* dx) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const batch vr(rscale), vmcu(-cu);
    const std::size_t vector_end = n - n % w;
    batch acc(T(0));
    for (std::size_t i = 0; i < vector_end; i += w) {
        const batch d = kernels::fma(batch::load_unaligned(dx + i), vr, vmcu);
        d.store_unaligned(dx + i);
        acc += d;
    }
    T s = xsimd::hadd(acc);
    for (std::size_t i = vector_end; i < n; ++i) {
        dx[i] = std::fma(dx[i], rscale, -cu);
        s += dx[i];
    }
    return s;
}

/// Affine gradients of one run: dgamma += sum_i g[i] yhat[i], dbeta += sum_i g[i], g[i] = |y[i]| < c ? dy[i] : 0.
template <class T>
void online_norm_run_affine_gradient(std::size_t n, const T* y, const T* dy, const T* yhat, T c, T& dgamma,
                                     T& dbeta) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const batch vc(c), zero(T(0));
    const std::size_t vector_end = n - n % w;
    batch ag(T(0)), ab(T(0));
    for (std::size_t i = 0; i < vector_end; i += w) {
        const batch g =
            xsimd::select(xsimd::abs(batch::load_unaligned(y + i)) < vc, batch::load_unaligned(dy + i), zero);
        ag = kernels::fma(g, batch::load_unaligned(yhat + i), ag);
        ab += g;
    }
    T sg = xsimd::hadd(ag), sb = xsimd::hadd(ab);
    for (std::size_t i = vector_end; i < n; ++i) {
        const T g = std::abs(y[i]) < c ? dy[i] : T(0);
        sg = std::fma(g, yhat[i], sg);
        sb += g;
    }
    dgamma += sg;
    dbeta += sb;
}

// --- Rank-1 form: every feature is its own channel of one value; the kernels run across the n = N features. ---

/// Forward of one sample (eq. 8a-8c with the spatial variance 0 and the spatial mean x): for i < n,
///   s = sqrt(v + eps), d = x - m, yhat = d / s, y = clamp(gamma yhat + beta, -c, c),
///   v <- a_f v + a_f (1 - a_f) d^2,  m <- m + (1 - a_f) d      (m, v updated in place).
template <class T>
void online_norm_features_forward(std::size_t n, const T* x, const T* gamma, const T* beta, T af, T one_minus_af, T eps,
                                  T c, T* m, T* v, T* yhat, T* y, T* scale) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const batch vaf(af), vomaf(one_minus_af), vafomaf(af * one_minus_af), veps(eps), vc(c);
    const std::size_t vector_end = n - n % w;
    for (std::size_t i = 0; i < vector_end; i += w) {
        const batch vm = batch::load_unaligned(m + i), vv = batch::load_unaligned(v + i);
        const batch s = xsimd::sqrt(vv + veps);
        const batch d = batch::load_unaligned(x + i) - vm;
        const batch yh = d / s;
        s.store_unaligned(scale + i);
        yh.store_unaligned(yhat + i);
        clamp_keep_nan(kernels::fma(batch::load_unaligned(gamma + i), yh, batch::load_unaligned(beta + i)), vc)
            .store_unaligned(y + i);
        kernels::fma(vaf, vv, vafomaf * (d * d)).store_unaligned(v + i);
        kernels::fma(vomaf, d, vm).store_unaligned(m + i);
    }
    const T afomaf = af * one_minus_af;
    for (std::size_t i = vector_end; i < n; ++i) {
        const T s = std::sqrt(v[i] + eps);
        const T d = x[i] - m[i];
        const T yh = d / s;
        scale[i] = s;
        yhat[i] = yh;
        y[i] = clamp_keep_nan_scalar(std::fma(gamma[i], yh, beta[i]), c);
        v[i] = std::fma(af, v[i], afomaf * (d * d));
        m[i] = std::fma(one_minus_af, d, m[i]);
    }
}

/// Backward-p1 of one sample (eq. 11a-12b, one value per channel): for i < n,
///   t = (|y| < c ? gamma dy : 0) - (1 - a_b) g_acc yhat;  g_acc <- g_acc + t yhat;
///   dx = t / s - (1 - a_b) u;                            u <- u + dx          (u, g_acc updated in place).
template <class T>
void online_norm_features_backward(std::size_t n, const T* y, const T* dy, const T* yhat, const T* scale,
                                   const T* gamma, T one_minus_ab, T c, T* u, T* g_acc, T* dx) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const batch vomab(one_minus_ab), vc(c), zero(T(0));
    const std::size_t vector_end = n - n % w;
    for (std::size_t i = 0; i < vector_end; i += w) {
        const batch yh = batch::load_unaligned(yhat + i), vg = batch::load_unaligned(g_acc + i);
        const batch vu = batch::load_unaligned(u + i);
        const batch gy = xsimd::select(xsimd::abs(batch::load_unaligned(y + i)) < vc,
                                       batch::load_unaligned(gamma + i) * batch::load_unaligned(dy + i), zero);
        const batch t = kernels::fnma(vomab * vg, yh, gy);
        kernels::fma(t, yh, vg).store_unaligned(g_acc + i);
        const batch d = kernels::fnma(vomab, vu, t / batch::load_unaligned(scale + i));
        d.store_unaligned(dx + i);
        (vu + d).store_unaligned(u + i);
    }
    for (std::size_t i = vector_end; i < n; ++i) {
        const T gy = std::abs(y[i]) < c ? gamma[i] * dy[i] : T(0);
        const T t = std::fma(-(one_minus_ab * g_acc[i]), yhat[i], gy);
        g_acc[i] = std::fma(t, yhat[i], g_acc[i]);
        const T d = std::fma(-one_minus_ab, u[i], t / scale[i]);
        dx[i] = d;
        u[i] += d;
    }
}

/// Affine gradients of one sample, per feature: dgamma[i] += g yhat[i], dbeta[i] += g, g = |y[i]| < c ? dy[i] : 0.
template <class T>
void online_norm_features_affine_gradient(std::size_t n, const T* y, const T* dy, const T* yhat, T c, T* dgamma,
                                          T* dbeta) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const batch vc(c), zero(T(0));
    const std::size_t vector_end = n - n % w;
    for (std::size_t i = 0; i < vector_end; i += w) {
        const batch g =
            xsimd::select(xsimd::abs(batch::load_unaligned(y + i)) < vc, batch::load_unaligned(dy + i), zero);
        kernels::fma(g, batch::load_unaligned(yhat + i), batch::load_unaligned(dgamma + i)).store_unaligned(dgamma + i);
        (batch::load_unaligned(dbeta + i) + g).store_unaligned(dbeta + i);
    }
    for (std::size_t i = vector_end; i < n; ++i) {
        const T g = std::abs(y[i]) < c ? dy[i] : T(0);
        dgamma[i] = std::fma(g, yhat[i], dgamma[i]);
        dbeta[i] += g;
    }
}

/// Evaluation on one run (rank-3 form): y[i] = clamp(gamma (x[i] - mean) * rscale + beta, -c, c) for i < n (the same
/// arithmetic as online_norm_run_forward, without the stash).
template <class T>
void online_norm_run_infer(std::size_t n, const T* x, T mean, T rscale, T gamma, T beta, T c, T* y) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const batch vm(mean), vr(rscale), vg(gamma), vb(beta), vc(c);
    const std::size_t vector_end = n - n % w;
    for (std::size_t i = 0; i < vector_end; i += w)
        clamp_keep_nan(kernels::fma(vg, (batch::load_unaligned(x + i) - vm) * vr, vb), vc).store_unaligned(y + i);
    for (std::size_t i = vector_end; i < n; ++i)
        y[i] = clamp_keep_nan_scalar(std::fma(gamma, (x[i] - mean) * rscale, beta), c);
}

/// Evaluation of one sample (rank-1 form): y[i] = clamp(gamma[i] (x[i] - m[i]) / sqrt(v[i] + eps) + beta[i], -c, c)
/// for i < n (the same arithmetic as online_norm_features_forward; m, v are read only).
template <class T>
void online_norm_features_infer(std::size_t n, const T* x, const T* gamma, const T* beta, const T* m, const T* v, T eps,
                                T c, T* y) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const batch veps(eps), vc(c);
    const std::size_t vector_end = n - n % w;
    for (std::size_t i = 0; i < vector_end; i += w) {
        const batch yh = (batch::load_unaligned(x + i) - batch::load_unaligned(m + i)) /
                         xsimd::sqrt(batch::load_unaligned(v + i) + veps);
        clamp_keep_nan(kernels::fma(batch::load_unaligned(gamma + i), yh, batch::load_unaligned(beta + i)), vc)
            .store_unaligned(y + i);
    }
    for (std::size_t i = vector_end; i < n; ++i)
        y[i] = clamp_keep_nan_scalar(std::fma(gamma[i], (x[i] - m[i]) / std::sqrt(v[i] + eps), beta[i]), c);
}

/// Throws std::invalid_argument when a state block does not hold `expected` values. `where` names the function.
inline void check_state_size(std::size_t got, std::size_t expected, const char* where) {
    if (got != expected)
        throw std::invalid_argument(std::string(where) + ": the state block holds " + std::to_string(got) +
                                    " values, the layer's state_count is " + std::to_string(expected));
}

}  // namespace detail

}  // namespace pipeprop
