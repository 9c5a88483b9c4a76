// pipeprop/kernels/elementwise.hpp: element-wise kernels and reductions written once over xsimd::batch with a
// scalar tail. The architecture is the one the translation unit is compiled for (e.g. -march=native).
#pragma once

#include <xsimd/xsimd.hpp>

#include "pipeprop/kernels/fma.hpp"
#include "pipeprop/kernels/strided_sums.hpp"

#include <algorithm>
#include <cstddef>

namespace pipeprop::kernels {

/// y[i] += alpha * x[i] for i < n.
template <class T>
void axpy(std::size_t n, T alpha, const T* x, T* y) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const batch va(alpha);
    std::size_t i = 0;
    for (; i + w <= n; i += w) {
        const batch r = kernels::fma(va, batch::load_unaligned(x + i), batch::load_unaligned(y + i));
        r.store_unaligned(y + i);
    }
    for (; i < n; ++i) y[i] += alpha * x[i];
}

/// y[i] += x[i] for i < n.
template <class T>
void add(std::size_t n, const T* x, T* y) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    std::size_t i = 0;
    for (; i + w <= n; i += w) (batch::load_unaligned(x + i) + batch::load_unaligned(y + i)).store_unaligned(y + i);
    for (; i < n; ++i) y[i] += x[i];
}

/// y[i] = max(x[i], 0) for i < n. A NaN input stays NaN (it is not hidden as 0), so divergence is seen at the loss.
template <class T>
void relu_forward(std::size_t n, const T* x, T* y) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const batch zero(T(0));
    std::size_t i = 0;
    for (; i + w <= n; i += w) {
        const batch v = batch::load_unaligned(x + i);
        xsimd::select(v < zero, zero, v).store_unaligned(y + i);
    }
    for (; i < n; ++i) y[i] = x[i] < T(0) ? T(0) : x[i];
}

/// dx[i] = y[i] > 0 ? dy[i] : 0 for i < n (y is the relu output).
template <class T>
void relu_backward(std::size_t n, const T* y, const T* dy, T* dx) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const batch zero(T(0));
    std::size_t i = 0;
    for (; i + w <= n; i += w) {
        const auto mask = batch::load_unaligned(y + i) > zero;
        xsimd::select(mask, batch::load_unaligned(dy + i), zero).store_unaligned(dx + i);
    }
    for (; i < n; ++i) dx[i] = y[i] > T(0) ? dy[i] : T(0);
}

// GCC 12 reports the pass-through operand of its own AVX-512 extract intrinsics (inside xsimd::hadd for double) as
// an uninitialized __Y where they are inlined here; the false warnings are silenced for the reductions only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
/// Sum of x[i] for i < n, in a fixed order (deterministic for a given build): one chain of vector additions, then
/// the horizontal sum, then the scalar tail (kernels/strided_sums.hpp with K = 1, which runs K such chains at once).
template <class T>
[[nodiscard]] T sum(std::size_t n, const T* x) noexcept {
    T s;
    strided_sums<1>(n, x, 0, &s);
    return s;
}

/// sum_i (x[i] - mean)^2 for i < n, in a fixed order (deterministic for a given build; strided_sums.hpp, K = 1).
template <class T>
[[nodiscard]] T centered_square_sum(std::size_t n, const T* x, T mean) noexcept {
    T s;
    strided_centered_square_sums<1>(n, x, 0, &mean, &s);
    return s;
}

/// sum_i dy[i] * (x[i] - mean) for i < n, in a fixed order.
template <class T>
[[nodiscard]] T centered_dot(std::size_t n, const T* dy, const T* x, T mean) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const batch vm(mean);
    const std::size_t vector_end = n - n % w;
    batch acc(T(0));
    for (std::size_t i = 0; i < vector_end; i += w)
        acc = kernels::fma(batch::load_unaligned(dy + i), batch::load_unaligned(x + i) - vm, acc);
    T s = xsimd::hadd(acc);
    for (std::size_t i = vector_end; i < n; ++i) s += dy[i] * (x[i] - mean);
    return s;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/// Copy n values.
template <class T>
void copy(std::size_t n, const T* x, T* y) noexcept {
    std::copy_n(x, n, y);
}

}  // namespace pipeprop::kernels
