// pipeprop/layers/group_norm.hpp: group normalization (Wu & He 2018, "Group Normalization", arXiv 1803.08494, §3.1
// "Formulation": mean and variance over the set S_i of one sample's values whose channels are in the same group),
// optionally followed by the per-channel affine transform of the same section.
//
// Statistics are per sample and per group, never across the micro-batch: results do not depend on the micro-batch
// size b or on how a batch is split into micro-batches, and training and evaluation compute the same function
// (docs/pitfalls.md item 6: there are no running statistics to update).
#pragma once

#include <xsimd/xsimd.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "pipeprop/kernels/fma.hpp"
#include "pipeprop/detail/image_dims.hpp"
#include "pipeprop/kernels/elementwise.hpp"
#include "pipeprop/kernels/strided_sums.hpp"
#include "pipeprop/layer_concept.hpp"
#include "pipeprop/parameter_tensor.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop {

/// Stash of group_norm for one micro-batch: per (sample, group) the mean and the reciprocal standard deviation
/// 1 / sqrt(var + eps) of the forward. stats: [max_b, Groups, 2] as (mean, rstd) pairs.
template <class T>
struct group_norm_stash {
    detail::aligned_buffer<T> stats;  ///< [max_b, Groups, 2]: (mean, rstd) of every (sample, group).
    std::size_t max_b = 0;  ///< The micro-batch capacity (make_stash); forward checks b against it.
};

namespace detail {
/// out[i] = a * x[i] + c for i < n (out and x do not overlap).
template <class T>
void affine_map(std::size_t n, const T* x, T a, T c, T* out) noexcept {
    for (std::size_t i = 0; i < n; ++i) out[i] = a * x[i] + c;
}
}  // namespace detail

/// Group normalization, bound form. Input and output [b, C, ...] (rank 3 [C, H, W] for images, rank 1 [C] for
/// features; any rank >= 1 works: the first dimension is the channel, the rest is the spatial extent S).
/// The C channels are split into Groups groups of C / Groups consecutive channels; for sample n and group g, over
/// its M = (C / Groups) * S values (biased variance, as in the paper):
///   mean = (1/M) sum x,  var = (1/M) sum (x - mean)^2,  rstd = 1 / sqrt(var + eps),  eps = 1e-5,
///   xhat = (x - mean) * rstd,  y = gamma[c] * xhat + beta[c]   (y = xhat when Affine is false)
/// Parameter block (Affine only): gamma [C] (init 1) followed by beta [C] (init 0); none when Affine is false.
/// p1 (assigned):  dxhat = gamma[c] dy;
///                 dx = rstd * (dxhat - (1/M) sum dxhat - xhat * (1/M) sum(dxhat * xhat))   (sums over the group)
/// p2 (added, Affine only): dgamma[c] += sum over n and S of dy * xhat;  dbeta[c] += sum over n and S of dy.
/// Stash: mean and rstd per (sample, group) (see group_norm_stash); p1 and p2 recompute xhat from x.
/// Static-asserts: Groups >= 1 and C divisible by Groups. Throws std::invalid_argument from forward when b is
/// outside [1, max_b of the stash].
template <class T, class InputShape, std::size_t Groups, bool Affine>
struct group_norm_layer {
    static constexpr std::size_t channels = InputShape::dims[0];  ///< Channels C: the first input dimension.
    static constexpr bool groups_divide = Groups > 0 && channels % Groups == 0;  ///< True when Groups >= 1 divides C.
    static_assert(groups_divide, "pipeprop::group_norm: the number of channels C (the first input dimension) must be "
                                 "divisible by the number of groups.");
    ///@{
    /// The template arguments: number of groups, and whether gamma / beta are learned.
    static constexpr std::size_t groups = Groups;
    static constexpr bool affine = Affine;
    ///@}
    /// Spatial extent S: the input size per channel (H W for images, 1 for features).
    static constexpr std::size_t spatial = InputShape::size / channels;                     // S
    /// Channels per group, C / Groups.
    static constexpr std::size_t channels_per_group = groups_divide ? channels / Groups : 1;
    /// Values per (sample, group) the statistics are taken over: M = (C / Groups) S.
    static constexpr std::size_t group_size = channels_per_group * spatial;
    static constexpr double epsilon = 1e-5;  ///< eps added to the variance (1e-5, as PyTorch).
    static constexpr bool normalization = true;  ///< joins the stage of the layer before it (layer_concept.hpp)
    /// Channels whose (sum, centered dot) pairs p1 and p2 reduce at once (kernels::strided_pair_chains).
    static constexpr std::size_t pair_chains = kernels::strided_pair_chains<T>;

    /// \copydoc pipeprop::layer_contract::value_type
    using value_type = T;
    /// \copydoc pipeprop::layer_contract::input_shape
    using input_shape = InputShape;
    /// \copydoc pipeprop::layer_contract::output_shape
    using output_shape = InputShape;
    /// \copydoc pipeprop::layer_contract::parameter_count
    static constexpr std::size_t parameter_count = Affine ? 2 * channels : 0;
    /// \copydoc pipeprop::layer_contract::stash_type
    using stash_type = group_norm_stash<T>;
    /// \copydoc pipeprop::layer_contract::workspace_type
    using workspace_type = no_workspace;

    /// \copydoc pipeprop::layer_contract::parameter_tensors
    static constexpr std::array<parameter_tensor, 2> parameter_tensors()
        requires Affine
    {
        return {parameter_tensor{"gamma", 1, {channels, 1, 1, 1}}, parameter_tensor{"beta", 1, {channels, 1, 1, 1}}};
    }

    /// \copydoc pipeprop::layer_contract::make_stash
    [[nodiscard]] stash_type make_stash(std::size_t max_b) const {
        stash_type st;
        st.max_b = max_b;
        st.stats.assign(max_b * Groups * 2, T(0));
        return st;
    }
    /// \copydoc pipeprop::layer_contract::stash_bytes
    [[nodiscard]] std::size_t stash_bytes(const stash_type& st) const noexcept {
        return sizeof(stash_type) + st.stats.size() * sizeof(T);
    }

    /// gamma = 1, beta = 0 (the seed is not used: the initialization is the identity transform).
    void init_parameters(std::span<T> w, std::uint64_t) const
        requires Affine
    {
        for (std::size_t c = 0; c < channels; ++c) w[c] = T(1);
        for (std::size_t c = channels; c < 2 * channels; ++c) w[c] = T(0);
    }

    /// \copydoc pipeprop::layer_contract::forward
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type& st, workspace_type&) const {
        detail::check_micro_batch(b, st.max_b, "pipeprop::group_norm::forward");
        const T inv_m = T(1) / static_cast<T>(group_size);
        for (std::size_t n = 0; n < b; ++n) {
            // groups in chunks of K, their sums as K independent chains (bitwise as one group at a time)
            kernels::for_each_chunk<kernels::strided_chains, Groups>([&]<std::size_t K>(std::size_t g0) {
                const std::size_t first = n * InputShape::size + g0 * group_size;
                T mean[K], var[K];
                kernels::strided_sums<K>(group_size, x + first, group_size, mean);
                for (std::size_t j = 0; j < K; ++j) mean[j] *= inv_m;
                kernels::strided_centered_square_sums<K>(group_size, x + first, group_size, mean, var);
                for (std::size_t j = 0; j < K; ++j) {
                    const std::size_t g = g0 + j;
                    const T* xg = x + first + j * group_size;
                    T* yg = y + first + j * group_size;
                    const T rstd = T(1) / std::sqrt(var[j] * inv_m + static_cast<T>(epsilon));
                    st.stats[(n * Groups + g) * 2] = mean[j];
                    st.stats[(n * Groups + g) * 2 + 1] = rstd;
                    for (std::size_t k = 0; k < channels_per_group; ++k) {
                        const std::size_t c = g * channels_per_group + k;
                        const T a = Affine ? w[c] * rstd : rstd;  // y = a x + (beta - a mean)
                        const T shift = (Affine ? w[channels + c] : T(0)) - a * mean[j];
                        detail::affine_map(spatial, xg + k * spatial, a, shift, yg + k * spatial);
                    }
                }
            });
        }
    }

    /// \copydoc pipeprop::layer_contract::backward_input
    void backward_input(std::span<const T> w, const T* x, const T*, const T* dy, T* dx, std::size_t b,
                        const stash_type& st, workspace_type&) const {
        const T inv_m = T(1) / static_cast<T>(group_size);
        for (std::size_t n = 0; n < b; ++n) {
            for (std::size_t g = 0; g < Groups; ++g) {
                const std::size_t first = n * InputShape::size + g * group_size;
                const T* xg = x + first;
                const T* dyg = dy + first;
                T* dxg = dx + first;
                const T mean = st.stats[(n * Groups + g) * 2];
                const T rstd = st.stats[(n * Groups + g) * 2 + 1];
                // s1 = sum dxhat, s2 = sum dxhat * xhat, with dxhat = gamma[c] dy and xhat = (x - mean) rstd.
                T s1 = 0, s2 = 0;
                kernels::for_each_chunk<pair_chains, channels_per_group>([&]<std::size_t K>(std::size_t k0) {
                    T sums[K], dots[K];  // per channel: sum dy, sum dy (x - mean)
                    kernels::fixed_sums_and_centered_dots<spatial, K>(dyg + k0 * spatial, xg + k0 * spatial, spatial,
                                                                      mean, sums, dots);
                    for (std::size_t j = 0; j < K; ++j) {
                        const T gamma = Affine ? w[g * channels_per_group + k0 + j] : T(1);
                        s1 += gamma * sums[j];
                        s2 += gamma * dots[j];
                    }
                });
                s2 *= rstd;
                // dx = rstd gamma dy - rstd s1 / M - (x - mean) rstd^2 s2 / M
                //    = (rstd gamma) dy + bx x + c0,  bx = -rstd^2 s2 / M,  c0 = -rstd s1 / M - bx mean.
                const T bx = -rstd * rstd * s2 * inv_m;
                const T c0 = -rstd * s1 * inv_m - bx * mean;
                for (std::size_t k = 0; k < channels_per_group; ++k) {
                    const std::size_t c = g * channels_per_group + k;
                    const T a = (Affine ? w[c] : T(1)) * rstd;
                    const T* d = dyg + k * spatial;
                    const T* xi = xg + k * spatial;
                    T* o = dxg + k * spatial;
                    for (std::size_t i = 0; i < spatial; ++i) o[i] = a * d[i] + bx * xi[i] + c0;
                }
            }
        }
    }

    /// \copydoc pipeprop::layer_contract::backward_weight
    void backward_weight(std::span<T> dw, const T* x, const T*, const T* dy, std::size_t b, const stash_type& st,
                         workspace_type&) const
        requires Affine
    {
        T* dgamma = dw.data();
        T* dbeta = dw.data() + channels;
        for (std::size_t n = 0; n < b; ++n) {
            for (std::size_t g = 0; g < Groups; ++g) {
                const T mean = st.stats[(n * Groups + g) * 2];
                const T rstd = st.stats[(n * Groups + g) * 2 + 1];
                kernels::for_each_chunk<pair_chains, channels_per_group>([&]<std::size_t K>(std::size_t k0) {
                    const std::size_t c0 = g * channels_per_group + k0;
                    const std::size_t first = n * InputShape::size + c0 * spatial;
                    T sums[K], dots[K];
                    kernels::fixed_sums_and_centered_dots<spatial, K>(dy + first, x + first, spatial, mean, sums,
                                                                      dots);
                    for (std::size_t j = 0; j < K; ++j) {
                        dgamma[c0 + j] += rstd * dots[j];
                        dbeta[c0 + j] += sums[j];
                    }
                });
            }
        }
    }
};

/// Group-normalization spec for a network list: pipeprop::group_norm<Groups, Affine = true>.
/// Groups = 1 is Layer Normalization over (C, ...); Groups = C is Instance Normalization (paper §3.1).
template <std::size_t Groups, bool Affine = true>
struct group_norm {
    static_assert(Groups > 0, "pipeprop::group_norm: the number of groups must be at least 1.");
    /// \copydoc pipeprop::layer_spec_contract::bind
    template <class T, class InputShape>
    using bind = group_norm_layer<T, InputShape, Groups, Affine>;
};

}  // namespace pipeprop
