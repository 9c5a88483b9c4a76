// pipeprop/layers/online_norm.hpp: Online Normalization (Chiley et al., "Online Normalization for Training Neural
// Networks", NeurIPS 2019, arXiv 1905.05894), a stateful layer (layer_concept.hpp, "Stateful layers").
//
// Each sample is normalized with running statistics of the samples BEFORE it (the paper's forward pass: per channel
// for a feature map, the scalar streaming form eq. 8a-8c per feature) and its input gradient is corrected with
// running statistics of the gradients before it (the backward pass, eq. 11a-12b), which removes, in expectation, the
// components along the constant direction and along the normalized output that batch normalization's exact gradient
// removes. The error-checking mechanism is activation clamping, the reference implementation's default
// (Cerebras/online-normalization; Chiley, "Error Compensation Mechanism in Online Normalization", Cerebras blog,
// 2020; the paper itself used layer scaling). Equations and pipeline notes: docs/online-norm.md.
//
// The samples of a micro-batch are processed one after the other, in order (the per-sample loop is the algorithm),
// and the forward state (m, v) and the backward state (u, g_acc) are disjoint: splitting a stream into micro-batches
// differently, or running the backward of a micro-batch later (PB, 1F1B), gives the same outputs, gradients and state
// for the same parameters, as long as forwards and backwards each run in sample order.
//
// The backward-p1 here is NOT the exact gradient of the forward: it ignores how a sample's statistics update changes
// the later samples' outputs and adds the gradient-statistics corrections instead (which is the algorithm). Only at
// b = 1 from u = g_acc = 0 does it equal the exact gradient of the forward (the statistics a sample is normalized
// with do not depend on it). backward-p2 (gamma, beta) is the exact gradient of the forward given the stash.
#pragma once

#include <xsimd/xsimd.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ratio>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "pipeprop/detail/image_dims.hpp"
#include "pipeprop/kernels/elementwise.hpp"
#include "pipeprop/kernels/strided_sums.hpp"
#include "pipeprop/kernels/fma.hpp"
#include "pipeprop/kernels/online_norm_kernels.hpp"
#include "pipeprop/layer_concept.hpp"
#include "pipeprop/parameter_tensor.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop {

/// Stash of online_norm for one micro-batch of b <= max_b samples, kept from forward to the backward passes:
///   yhat:  [max_b, input_shape...]  the normalized input (x - m) / s, BEFORE the affine transform and the clamp
///                                   (backward-p1 and -p2 need it; y cannot give it back where it was clipped or
///                                   where gamma = 0);
///   scale: [max_b, C]               s = sqrt(v + eps), the standard deviation each sample was normalized with.
template <class T>
struct online_norm_stash {
    /// [max_b, input_shape...]: (x - m) / s before the affine transform and the clamp.
    detail::aligned_buffer<T> yhat;
    /// [max_b, C]: s = sqrt(v + eps), the standard deviation each sample was normalized with.
    detail::aligned_buffer<T> scale;
    std::size_t max_b = 0;  ///< The micro-batch capacity (make_stash); the passes check b against it.
};

/// Online Normalization, bound form (a stateful layer: forward and backward-p1 take the state block s).
///
/// Shapes: input and output [b, C, H, W] (rank 3: statistics per channel c over its H*W values) or [b, N] (rank 1:
/// per feature, C = N channels of one value, the scalar streaming form of eq. 8a-8c). Rank 2 [L, D] and ranks above
/// 3 are rejected by a static_assert.
///
/// State block s (state_count = 4 C values, state_tensors(): "m", "v", "u", "g_acc", each [C]): the running mean m
/// (init 0) and variance v (init 1) of the forward, and the running means u (init 0) and g_acc (init 0) of the
/// backward's control process. Parameter block: gamma [C] (init 1) followed by beta [C] (init 0).
///
/// Forward, for each sample i of the micro-batch IN ORDER and each channel c, with the statistics from before it
/// (mu_i, var_i: mean and biased variance of x_i[c] over its S = H*W values; S = 1, var_i = 0 for rank 1):
///   s_i = sqrt(v + eps), eps = 1e-5;  yhat_i = (x_i - m) / s_i;  y_i = clamp(gamma[c] yhat_i + beta[c], -K, K)
///   v <- a_f v + (1 - a_f) var_i + a_f (1 - a_f) (mu_i - m)^2;  m <- m + (1 - a_f) (mu_i - m)
/// (the paper's forward equations; eq. 8a-8c for rank 1). The clamp at K (activation clamping, see the file
/// comment; K = 5 by default) is the last step; where it clips (|y| = K) the gradient is zero. The stash keeps
/// yhat_i and s_i (online_norm_stash).
///
/// Backward-p1 (assigned dx), for each sample i IN ORDER and channel c, with g_i = (|y_i| < K ? gamma[c] dy_i : 0)
/// (the gradient w.r.t. yhat; gamma is the current w's) and spatial means over the S values:
///   t = g_i - (1 - a_b) g_acc yhat_i;   g_acc <- g_acc + mean(t yhat_i)                            (eq. 11a, 11b)
///   dx_i = t / s_i - (1 - a_b) u;       u <- u + mean(dx_i)                                         (eq. 12a, 12b)
/// This is NOT the exact gradient of the forward (see the file comment); testing::check_gradients does not apply.
///
/// Backward-p2 (added): dgamma[c] += sum over samples and S of (|y| < K ? dy : 0) yhat;  dbeta[c] += sum of
/// (|y| < K ? dy : 0). It reads y (the forward's output, for the clamp mask) and the stash; it never touches s.
///
/// infer: y = clamp(gamma (x - m) / sqrt(v + eps) + beta, -K, K) with the statistics in s, for every sample; s is not
/// changed (evaluation).
///
/// Decays AlphaForward (a_f) and AlphaBackward (a_b) and the clamp value K are std::ratio template parameters;
/// 1 - a is computed as (den - num) / den. Static-asserts: rank 1 or 3; 0 < a_f < 1 and 0 < a_b < 1 as std::ratio;
/// K > 0 as std::ratio. Throws std::invalid_argument from forward and backward_input when b is outside
/// [1, max_b of the stash], and from forward, backward_input and infer when s does not hold state_count values.
/// No heap allocation after make_stash.
template <class T, class InputShape, class AlphaForward, class AlphaBackward, class Clamp>
struct online_norm_layer {
    static_assert(InputShape::rank == 1 || InputShape::rank == 3,
                  "pipeprop::online_norm: the input must be rank 3 [channels, height, width] (statistics per channel "
                  "over height * width) or rank 1 [features] (per feature); rank 2 [tokens, features] is not "
                  "supported.");
    static_assert(detail::is_decay_ratio<AlphaForward>,
                  "pipeprop::online_norm: the forward decay a_f must be a std::ratio strictly between 0 and 1, e.g. "
                  "std::ratio<1023, 1024>.");
    static_assert(detail::is_decay_ratio<AlphaBackward>,
                  "pipeprop::online_norm: the backward decay a_b must be a std::ratio strictly between 0 and 1, e.g. "
                  "std::ratio<127, 128>.");
    static_assert(detail::is_positive_ratio<Clamp>,
                  "pipeprop::online_norm: the clamp value must be a positive std::ratio, e.g. std::ratio<5>.");

    ///@{
    /// The template arguments as std::ratio: forward decay a_f, backward decay a_b, clamp K.
    using alpha_forward_ratio = AlphaForward;                            // a_f
    using alpha_backward_ratio = AlphaBackward;                          // a_b
    using clamp_ratio = Clamp;                                           // K
    ///@}
    /// Channels C (features for a rank-1 input).
    static constexpr std::size_t channels = InputShape::dims[0];         // C
    /// Spatial extent S = H W (1 for a rank-1 input).
    static constexpr std::size_t spatial = InputShape::size / channels;
    /// True for a rank-1 input: statistics per feature instead of per channel.
    static constexpr bool per_feature = InputShape::rank == 1;
    static constexpr double epsilon = 1e-5;  ///< eps added to the running variance.
    static constexpr bool normalization = true;  ///< joins the stage of the layer before it (layer_concept.hpp)
    ///@{
    /// a_f, a_b, 1 - a_f, 1 - a_b and K as double (1 - a computed exactly from the ratio).
    static constexpr double alpha_forward = detail::ratio_value<AlphaForward>;
    static constexpr double alpha_backward = detail::ratio_value<AlphaBackward>;
    static constexpr double one_minus_alpha_forward = detail::one_minus_ratio_value<AlphaForward>;
    static constexpr double one_minus_alpha_backward = detail::one_minus_ratio_value<AlphaBackward>;
    static constexpr double clamp_value = detail::ratio_value<Clamp>;
    ///@}

    /// \copydoc pipeprop::layer_contract::value_type
    using value_type = T;
    /// \copydoc pipeprop::layer_contract::input_shape
    using input_shape = InputShape;
    /// \copydoc pipeprop::layer_contract::output_shape
    using output_shape = InputShape;
    /// \copydoc pipeprop::layer_contract::parameter_count
    static constexpr std::size_t parameter_count = 2 * channels;
    /// \copydoc pipeprop::stateful_layer_contract::state_count
    static constexpr std::size_t state_count = 4 * channels;
    /// \copydoc pipeprop::layer_contract::stash_type
    using stash_type = online_norm_stash<T>;
    /// \copydoc pipeprop::layer_contract::workspace_type
    using workspace_type = no_workspace;

    /// \copydoc pipeprop::layer_contract::parameter_tensors
    static constexpr std::array<parameter_tensor, 2> parameter_tensors() {
        return {parameter_tensor{"gamma", 1, {channels, 1, 1, 1}}, parameter_tensor{"beta", 1, {channels, 1, 1, 1}}};
    }
    /// The state block's tensors in order: forward mean m, forward variance v, backward means u and g_acc.
    static constexpr std::array<parameter_tensor, 4> state_tensors() {
        return {parameter_tensor{"m", 1, {channels, 1, 1, 1}}, parameter_tensor{"v", 1, {channels, 1, 1, 1}},
                parameter_tensor{"u", 1, {channels, 1, 1, 1}}, parameter_tensor{"g_acc", 1, {channels, 1, 1, 1}}};
    }

    /// \copydoc pipeprop::layer_contract::make_stash
    [[nodiscard]] stash_type make_stash(std::size_t max_b) const {
        stash_type st;
        st.max_b = max_b;
        st.yhat.assign(max_b * InputShape::size, T(0));
        st.scale.assign(max_b * channels, T(0));
        return st;
    }
    /// \copydoc pipeprop::layer_contract::stash_bytes
    [[nodiscard]] std::size_t stash_bytes(const stash_type& st) const noexcept {
        return sizeof(stash_type) + (st.yhat.size() + st.scale.size()) * sizeof(T);
    }

    /// gamma = 1, beta = 0 (the seed is not used: the initialization is the identity transform).
    void init_parameters(std::span<T> w, std::uint64_t) const {
        for (std::size_t c = 0; c < channels; ++c) w[c] = T(1);
        for (std::size_t c = channels; c < 2 * channels; ++c) w[c] = T(0);
    }

    /// m = 0, v = 1, u = 0, g_acc = 0 (paper §3; the reference implementation's initial state).
    void init_state(std::span<T> s) const {
        detail::check_state_size(s.size(), state_count, "pipeprop::online_norm::init_state");
        for (std::size_t c = 0; c < channels; ++c) {
            s[c] = T(0);
            s[channels + c] = T(1);
            s[2 * channels + c] = T(0);
            s[3 * channels + c] = T(0);
        }
    }

    /// Training forward: y [b, input_shape...] assigned, the stash filled, m and v of s advanced by b samples.
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type& st, workspace_type&,
                 std::span<T> s) const {
        detail::check_micro_batch(b, st.max_b, "pipeprop::online_norm::forward");
        detail::check_state_size(s.size(), state_count, "pipeprop::online_norm::forward");
        const T* gamma = w.data();
        const T* beta = w.data() + channels;
        T* m = s.data();
        T* v = s.data() + channels;
        const T af = static_cast<T>(alpha_forward), omaf = static_cast<T>(one_minus_alpha_forward);
        const T eps = static_cast<T>(epsilon), k = static_cast<T>(clamp_value);
        for (std::size_t n = 0; n < b; ++n) {
            const std::size_t first = n * InputShape::size;
            T* scale = st.scale.data() + n * channels;
            if constexpr (per_feature) {
                detail::online_norm_features_forward(channels, x + first, gamma, beta, af, omaf, eps, k, m, v,
                                                     st.yhat.data() + first, y + first, scale);
            } else {
                const T inv_s = T(1) / static_cast<T>(spatial);
                // channels in chunks of K, their statistics as K independent chains (bitwise as one at a time)
                kernels::for_each_chunk<kernels::strided_chains, channels>([&]<std::size_t K>(std::size_t c0) {
                    T mu[K], var[K];
                    kernels::strided_sums<K>(spatial, x + first + c0 * spatial, spatial, mu);
                    for (std::size_t j = 0; j < K; ++j) mu[j] *= inv_s;
                    kernels::strided_centered_square_sums<K>(spatial, x + first + c0 * spatial, spatial, mu, var);
                    for (std::size_t j = 0; j < K; ++j) {
                        const std::size_t c = c0 + j;
                        const std::size_t at = first + c * spatial;
                        const T sd = std::sqrt(v[c] + eps);
                        scale[c] = sd;
                        detail::online_norm_run_forward(spatial, x + at, m[c], T(1) / sd, gamma[c], beta[c], k,
                                                        st.yhat.data() + at, y + at);
                        const T delta = mu[j] - m[c];
                        v[c] = af * v[c] + omaf * (var[j] * inv_s) + af * omaf * (delta * delta);
                        m[c] += omaf * delta;
                    }
                });
            }
        }
    }

    /// Backward-p1: dx [b, input_shape...] assigned (eq. 11a-12b), u and g_acc of s advanced by b samples.
    void backward_input(std::span<const T> w, const T*, const T* y, const T* dy, T* dx, std::size_t b,
                        const stash_type& st, workspace_type&, std::span<T> s) const {
        detail::check_micro_batch(b, st.max_b, "pipeprop::online_norm::backward_input");
        detail::check_state_size(s.size(), state_count, "pipeprop::online_norm::backward_input");
        const T* gamma = w.data();
        T* u = s.data() + 2 * channels;
        T* g_acc = s.data() + 3 * channels;
        const T omab = static_cast<T>(one_minus_alpha_backward), k = static_cast<T>(clamp_value);
        for (std::size_t n = 0; n < b; ++n) {
            const std::size_t first = n * InputShape::size;
            const T* scale = st.scale.data() + n * channels;
            if constexpr (per_feature) {
                detail::online_norm_features_backward(channels, y + first, dy + first, st.yhat.data() + first, scale,
                                                      gamma, omab, k, u, g_acc, dx + first);
            } else {
                const T inv_s = T(1) / static_cast<T>(spatial);
                for (std::size_t c = 0; c < channels; ++c) {
                    const std::size_t at = first + c * spatial;
                    const T ty = detail::online_norm_run_correct_y(spatial, y + at, dy + at, st.yhat.data() + at,
                                                                   gamma[c], omab * g_acc[c], k, dx + at);
                    g_acc[c] += ty * inv_s;
                    const T sx = detail::online_norm_run_correct_mean(spatial, T(1) / scale[c], omab * u[c], dx + at);
                    u[c] += sx * inv_s;
                }
            }
        }
    }

    /// Backward-p2: dgamma, dbeta ADDED into dw (layout of the parameter block); s is not involved.
    void backward_weight(std::span<T> dw, const T*, const T* y, const T* dy, std::size_t b, const stash_type& st,
                         workspace_type&) const {
        T* dgamma = dw.data();
        T* dbeta = dw.data() + channels;
        const T k = static_cast<T>(clamp_value);
        for (std::size_t n = 0; n < b; ++n) {
            const std::size_t first = n * InputShape::size;
            if constexpr (per_feature) {
                detail::online_norm_features_affine_gradient(channels, y + first, dy + first, st.yhat.data() + first, k,
                                                             dgamma, dbeta);
            } else {
                for (std::size_t c = 0; c < channels; ++c) {
                    const std::size_t at = first + c * spatial;
                    detail::online_norm_run_affine_gradient(spatial, y + at, dy + at, st.yhat.data() + at, k, dgamma[c],
                                                            dbeta[c]);
                }
            }
        }
    }

    /// Evaluation: y [b, input_shape...] assigned with the frozen statistics of s; s is not changed.
    void infer(std::span<const T> w, const T* x, T* y, std::size_t b, workspace_type&, std::span<const T> s) const {
        detail::check_state_size(s.size(), state_count, "pipeprop::online_norm::infer");
        const T* gamma = w.data();
        const T* beta = w.data() + channels;
        const T* m = s.data();
        const T* v = s.data() + channels;
        const T eps = static_cast<T>(epsilon), k = static_cast<T>(clamp_value);
        for (std::size_t n = 0; n < b; ++n) {
            const std::size_t first = n * InputShape::size;
            if constexpr (per_feature) {
                detail::online_norm_features_infer(channels, x + first, gamma, beta, m, v, eps, k, y + first);
            } else {
                for (std::size_t c = 0; c < channels; ++c) {
                    const std::size_t at = first + c * spatial;
                    detail::online_norm_run_infer(spatial, x + at, m[c], T(1) / std::sqrt(v[c] + eps), gamma[c],
                                                  beta[c], k, y + at);
                }
            }
        }
    }
};

/// Online-normalization spec for a network list: pipeprop::online_norm<AlphaForward = std::ratio<1023, 1024>,
/// AlphaBackward = std::ratio<127, 128>, Clamp = std::ratio<5>> (the reference's CIFAR-10 decays; ImageNet used
/// std::ratio<999, 1000> and std::ratio<99, 100>). Bound to (T, input shape) as online_norm_layer (see there).
template <class AlphaForward = std::ratio<1023, 1024>, class AlphaBackward = std::ratio<127, 128>,
          class Clamp = std::ratio<5>>
struct online_norm {
    static_assert(detail::is_decay_ratio<AlphaForward>,
                  "pipeprop::online_norm: the forward decay a_f must be a std::ratio strictly between 0 and 1, e.g. "
                  "std::ratio<1023, 1024>.");
    static_assert(detail::is_decay_ratio<AlphaBackward>,
                  "pipeprop::online_norm: the backward decay a_b must be a std::ratio strictly between 0 and 1, e.g. "
                  "std::ratio<127, 128>.");
    static_assert(detail::is_positive_ratio<Clamp>,
                  "pipeprop::online_norm: the clamp value must be a positive std::ratio, e.g. std::ratio<5>.");
    /// \copydoc pipeprop::layer_spec_contract::bind
    template <class T, class InputShape>
    using bind = online_norm_layer<T, InputShape, AlphaForward, AlphaBackward, Clamp>;
};

}  // namespace pipeprop
