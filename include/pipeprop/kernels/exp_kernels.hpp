// pipeprop/kernels/exp_kernels.hpp: the kernels built on the exponential, written once over xsimd::batch: a row's
// maximum, its shifted exponentials and their sum (softmax and cross-entropy), a row's scaling, and the SwiGLU gate
// h = silu(g) u with its backward.
//
// Every element goes through the same vector exponential (xsimd::exp), the last partial batch through a padded
// batch, so an element's value does not depend on its position in the row or on the row's length. Sums are taken in
// a fixed order (one vector accumulator, then the tail in index order): deterministic for a given build. xsimd::exp
// differs from std::exp by at most a few ulp.
#pragma once

#include <xsimd/xsimd.hpp>

#include <cstddef>
#include <limits>

namespace pipeprop::kernels {

// GCC 12 reports -Wuninitialized inside its own AVX-512 intrinsics (the masked-rounding helpers of xsimd::exp's
// range reduction, an uninitialized pass-through operand that is never read); not a bug of this code. The kernels
// that call xsimd::exp are flattened (every call inlined), so that the pragma below covers the inlined exp too.
#if defined(__GNUC__)
#define PIPEPROP_EXP_KERNEL [[gnu::flatten]]
#else
#define PIPEPROP_EXP_KERNEL
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace detail {
/// The first `count` (< batch size) values of p in a batch, the other lanes `fill`.
template <class T>
[[nodiscard]] xsimd::batch<T> load_partial(const T* p, std::size_t count, T fill) noexcept {
    using batch = xsimd::batch<T>;
    alignas(batch::arch_type::alignment()) T lanes[batch::size];
    for (std::size_t k = 0; k < batch::size; ++k) lanes[k] = k < count ? p[k] : fill;
    return batch::load_aligned(lanes);
}

/// Stores the first `count` (< batch size) lanes of v at p.
template <class T>
void store_partial(const xsimd::batch<T>& v, std::size_t count, T* p) noexcept {
    using batch = xsimd::batch<T>;
    alignas(batch::arch_type::alignment()) T lanes[batch::size];
    v.store_aligned(lanes);
    for (std::size_t k = 0; k < count; ++k) p[k] = lanes[k];
}

/// sigmoid(g) = 1 / (1 + exp(-g)); 0 for g -> -inf (exp overflows to inf), 1 for g -> +inf.
template <class T>
[[nodiscard]] xsimd::batch<T> sigmoid(const xsimd::batch<T>& g) noexcept {
    return xsimd::batch<T>(T(1)) / (xsimd::batch<T>(T(1)) + xsimd::exp(-g));
}
}  // namespace detail

/// max_c z[c] over n values; -inf for n = 0. A NaN among them may or may not win (as std::max).
template <class T>
[[nodiscard]] T row_max(const T* z, std::size_t n) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const std::size_t vector_end = n - n % w;
    T mx = -std::numeric_limits<T>::infinity();
    if (vector_end > 0) {
        batch acc = batch::load_unaligned(z);
        for (std::size_t c = w; c < vector_end; c += w) acc = xsimd::max(acc, batch::load_unaligned(z + c));
        alignas(batch::arch_type::alignment()) T lanes[w];  // xsimd 8.1 has no horizontal max
        acc.store_aligned(lanes);
        for (std::size_t k = 0; k < w; ++k) mx = lanes[k] > mx ? lanes[k] : mx;
    }
    for (std::size_t c = vector_end; c < n; ++c) mx = z[c] > mx ? z[c] : mx;
    return mx;
}

/// Returns sum_c exp(z[c] - shift) over n values; when out != nullptr also writes out[c] = exp(z[c] - shift)
/// (out may equal z). With shift = row_max(z, n) every term is in (0, 1] and the sum in [1, n].
template <class T>
PIPEPROP_EXP_KERNEL [[nodiscard]] T exp_sum(const T* z, T shift, std::size_t n, T* out) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const batch vs(shift);
    batch acc(T(0));
    std::size_t c = 0;
    for (; c + w <= n; c += w) {
        const batch e = xsimd::exp(batch::load_unaligned(z + c) - vs);
        if (out != nullptr) e.store_unaligned(out + c);
        acc += e;
    }
    T s = xsimd::hadd(acc);
    if (c < n) {
        const std::size_t rest = n - c;
        alignas(batch::arch_type::alignment()) T lanes[w];
        xsimd::exp(detail::load_partial(z + c, rest, shift) - vs).store_aligned(lanes);
        for (std::size_t k = 0; k < rest; ++k) {
            if (out != nullptr) out[c + k] = lanes[k];
            s += lanes[k];
        }
    }
    return s;
}

/// d[c] *= f over n values.
template <class T>
void scale_row(T* d, std::size_t n, T f) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const batch vf(f);
    std::size_t c = 0;
    for (; c + w <= n; c += w) (batch::load_unaligned(d + c) * vf).store_unaligned(d + c);
    for (; c < n; ++c) d[c] *= f;
}

/// The SwiGLU gate of one row: h[j] = silu(g[j]) u[j] = g[j] sigmoid(g[j]) u[j] for j < n.
template <class T>
PIPEPROP_EXP_KERNEL void swiglu_gate_row(std::size_t n, const T* g, const T* u, T* h) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    std::size_t j = 0;
    for (; j + w <= n; j += w) {
        const batch vg = batch::load_unaligned(g + j);
        (vg * detail::sigmoid(vg) * batch::load_unaligned(u + j)).store_unaligned(h + j);
    }
    if (j < n) {
        const std::size_t rest = n - j;
        const batch vg = detail::load_partial(g + j, rest, T(0));
        detail::store_partial(batch(vg * detail::sigmoid(vg) * detail::load_partial(u + j, rest, T(0))), rest, h + j);
    }
}

/// Backward of swiglu_gate_row, s = sigmoid(g[j]): dg[j] = dh[j] u[j] s (1 + g[j] (1 - s)) (d silu / dg) and
/// du[j] = dh[j] g[j] s, assigned, for j < n.
template <class T>
PIPEPROP_EXP_KERNEL void swiglu_gate_row_backward(std::size_t n, const T* g, const T* u, const T* dh, T* dg,
                                              T* du) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const batch one(T(1));
    const auto step = [&](const batch& vg, const batch& vu, const batch& vdh, batch& rg, batch& ru) {
        const batch s = detail::sigmoid(vg);
        rg = vdh * vu * s * (one + vg * (one - s));
        ru = vdh * vg * s;
    };
    std::size_t j = 0;
    batch rg, ru;
    for (; j + w <= n; j += w) {
        step(batch::load_unaligned(g + j), batch::load_unaligned(u + j), batch::load_unaligned(dh + j), rg, ru);
        rg.store_unaligned(dg + j);
        ru.store_unaligned(du + j);
    }
    if (j < n) {
        const std::size_t rest = n - j;
        step(detail::load_partial(g + j, rest, T(0)), detail::load_partial(u + j, rest, T(0)),
             detail::load_partial(dh + j, rest, T(0)), rg, ru);
        detail::store_partial(rg, rest, dg + j);
        detail::store_partial(ru, rest, du + j);
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#undef PIPEPROP_EXP_KERNEL

}  // namespace pipeprop::kernels
