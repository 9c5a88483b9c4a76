// pipeprop/layers/rms_norm.hpp: root-mean-square layer normalization (Zhang & Sennrich 2019, "Root Mean Square Layer
// Normalization", NeurIPS, arXiv 1910.07467, §4 eq. 4: a_i / RMS(a) * g_i with RMS(a) = sqrt(mean(a^2)), no
// re-centering, no bias), with eps inside the square root as in LLaMA (Touvron et al. 2023, arXiv 2302.13971, §2
// "Pre-normalization"; its reference RMSNorm computes x * rsqrt(mean(x^2) + eps) * weight).
//
// Statistics are per token (over the last dimension D only), never across tokens or the micro-batch: results do not
// depend on b or on how a batch is split into micro-batches, and training and evaluation compute the same function.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ratio>
#include <span>
#include <type_traits>
#include <xsimd/xsimd.hpp>

#include "pipeprop/detail/image_dims.hpp"
#include "pipeprop/detail/sequence_dims.hpp"
#include "pipeprop/kernels/fma.hpp"
#include "pipeprop/layer_concept.hpp"
#include "pipeprop/parameter_tensor.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop {

/// Stash of rms_norm for one micro-batch: the reciprocal RMS 1 / sqrt(mean(x^2) + eps) of every token.
/// rstd: [max_b, L].
template <class T>
struct rms_norm_stash {
    detail::aligned_buffer<T> rstd;  ///< [max_b, L]: 1 / sqrt(mean(x^2) + eps) of every token.
    std::size_t max_b = 0;  ///< The micro-batch capacity (make_stash); forward checks b against it.
};

namespace detail {
template <class R>
struct is_ratio : std::false_type {};
template <std::intmax_t N, std::intmax_t D>
struct is_ratio<std::ratio<N, D>> : std::true_type {};

/// sum_i a[i] * b[i] for i < n, vectorized with xsimd (fixed order: deterministic for a given build).
template <class T>
[[nodiscard]] T rms_dot(std::size_t n, const T* a, const T* b) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const std::size_t vector_end = n - n % w;
    batch acc(T(0));
    for (std::size_t i = 0; i < vector_end; i += w)
        acc = kernels::fma(batch::load_unaligned(a + i), batch::load_unaligned(b + i), acc);
    T s = xsimd::hadd(acc);
    for (std::size_t i = vector_end; i < n; ++i) s += a[i] * b[i];
    return s;
}
/// sum_i a[i] * b[i] * c[i] for i < n, vectorized with xsimd.
template <class T>
[[nodiscard]] T rms_dot3(std::size_t n, const T* a, const T* b, const T* c) noexcept {
    using batch = xsimd::batch<T>;
    constexpr std::size_t w = batch::size;
    const std::size_t vector_end = n - n % w;
    batch acc(T(0));
    for (std::size_t i = 0; i < vector_end; i += w)
        acc = kernels::fma(batch::load_unaligned(a + i) * batch::load_unaligned(b + i), batch::load_unaligned(c + i),
                           acc);
    T s = xsimd::hadd(acc);
    for (std::size_t i = vector_end; i < n; ++i) s += a[i] * b[i] * c[i];
    return s;
}
}  // namespace detail

/// RMS normalization, bound form. Input and output [b, L, D]; for every token (n, t), over its D features:
///   ms = (1/D) sum_i x_i^2,  r = 1 / sqrt(ms + eps),  y_i = x_i r g_i,   eps = Eps::num / Eps::den
/// Parameter block: scale g [D] (init 1).
/// p1 (assigned):  dx_i = r g_i dy_i - x_i (r^3 / D) sum_j dy_j g_j x_j
/// p2 (added):     dg_i += sum over the b L tokens of dy_i x_i r
/// Stash: r per token (see rms_norm_stash); p1 reads the current g (from w), p2 only x, dy and the stash.
/// Static-asserts: the input is rank 2 [L, D]; Eps is a std::ratio greater than 0 (in the spec).
/// Throws std::invalid_argument from forward when b is outside [1, max_b of the stash]; nothing else; does not
/// allocate after make_stash.
template <class T, class InputShape, class Eps>
struct rms_norm_layer {
    static_assert(sequence_shape<InputShape>,
                  "pipeprop::rms_norm: the input of an rms_norm layer must be rank 2 [L, D], a sequence of L tokens "
                  "normalized over their D features.");
    ///@{
    /// Sequence length L and features D of the input [L, D].
    static constexpr std::size_t sequence_length = detail::sequence_length_of<InputShape>();  // L
    static constexpr std::size_t dim = detail::feature_dim_of<InputShape>();                  // D
    ///@}
    /// eps added to mean(x^2) before the square root (the value of the std::ratio Eps).
    static constexpr double epsilon = static_cast<double>(Eps::num) / static_cast<double>(Eps::den);

    /// \copydoc pipeprop::layer_contract::value_type
    using value_type = T;
    /// \copydoc pipeprop::layer_contract::input_shape
    using input_shape = InputShape;
    /// \copydoc pipeprop::layer_contract::output_shape
    using output_shape = InputShape;
    /// \copydoc pipeprop::layer_contract::parameter_count
    static constexpr std::size_t parameter_count = dim;
    static constexpr bool normalization = true;  ///< joins the stage of the layer before it (layer_concept.hpp)
    /// \copydoc pipeprop::layer_contract::stash_type
    using stash_type = rms_norm_stash<T>;
    /// \copydoc pipeprop::layer_contract::workspace_type
    using workspace_type = no_workspace;

    /// \copydoc pipeprop::layer_contract::parameter_tensors
    static constexpr std::array<parameter_tensor, 1> parameter_tensors() {
        return {parameter_tensor{"scale", 1, {dim, 1, 1, 1}}};
    }

    /// \copydoc pipeprop::layer_contract::make_stash
    [[nodiscard]] stash_type make_stash(std::size_t max_b) const {
        stash_type st;
        st.max_b = max_b;
        st.rstd.assign(max_b * sequence_length, T(0));
        return st;
    }
    /// \copydoc pipeprop::layer_contract::stash_bytes
    [[nodiscard]] std::size_t stash_bytes(const stash_type& st) const noexcept {
        return sizeof(stash_type) + st.rstd.size() * sizeof(T);
    }

    /// g = 1 (the seed is not used: the initialization is the identity scale).
    void init_parameters(std::span<T> w, std::uint64_t) const {
        for (std::size_t i = 0; i < dim; ++i) w[i] = T(1);
    }

    /// \copydoc pipeprop::layer_contract::forward
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type& st, workspace_type&) const {
        detail::check_micro_batch(b, st.max_b, "pipeprop::rms_norm::forward");
        const T* g = w.data();
        for (std::size_t r = 0; r < b * sequence_length; ++r) {
            const T* xr = x + r * dim;
            T* yr = y + r * dim;
            const T ms = detail::rms_dot(dim, xr, xr) / static_cast<T>(dim);
            const T rstd = T(1) / std::sqrt(ms + static_cast<T>(epsilon));
            st.rstd[r] = rstd;
            for (std::size_t i = 0; i < dim; ++i) yr[i] = xr[i] * rstd * g[i];
        }
    }

    /// \copydoc pipeprop::layer_contract::backward_input
    void backward_input(std::span<const T> w, const T* x, const T*, const T* dy, T* dx, std::size_t b,
                        const stash_type& st, workspace_type&) const {
        const T* g = w.data();
        for (std::size_t r = 0; r < b * sequence_length; ++r) {
            const T* xr = x + r * dim;
            const T* dyr = dy + r * dim;
            T* dxr = dx + r * dim;
            const T rstd = st.rstd[r];
            const T c = rstd * rstd * rstd / static_cast<T>(dim) * detail::rms_dot3(dim, dyr, g, xr);
            for (std::size_t i = 0; i < dim; ++i) dxr[i] = rstd * g[i] * dyr[i] - xr[i] * c;
        }
    }

    /// \copydoc pipeprop::layer_contract::backward_weight
    void backward_weight(std::span<T> dw, const T* x, const T*, const T* dy, std::size_t b, const stash_type& st,
                         workspace_type&) const {
        T* dg = dw.data();
        for (std::size_t r = 0; r < b * sequence_length; ++r) {
            const T* xr = x + r * dim;
            const T* dyr = dy + r * dim;
            const T rstd = st.rstd[r];
            for (std::size_t i = 0; i < dim; ++i) dg[i] += dyr[i] * xr[i] * rstd;
        }
    }
};

/// RMS normalization spec for a network list: pipeprop::rms_norm<> (eps = 1e-5, LLaMA 2's value) or
/// pipeprop::rms_norm<std::ratio<1, 1000000>> (eps = 1e-6, LLaMA 1's). Input and output shape<L, D>.
template <class Eps = std::ratio<1, 100000>>
struct rms_norm {
    static_assert(detail::is_ratio<Eps>::value,
                  "pipeprop::rms_norm: eps must be given as a std::ratio, e.g. rms_norm<std::ratio<1, 1000000>> for "
                  "1e-6.");
    static_assert(detail::is_ratio<Eps>::value && Eps::num > 0,
                  "pipeprop::rms_norm: eps must be greater than 0 (it keeps 1 / sqrt(mean(x^2) + eps) finite for an "
                  "all-zero token).");
    /// \copydoc pipeprop::layer_spec_contract::bind
    template <class T, class InputShape>
    using bind = rms_norm_layer<T, InputShape, Eps>;
};

}  // namespace pipeprop
