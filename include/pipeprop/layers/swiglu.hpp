// pipeprop/layers/swiglu.hpp: the SwiGLU feed-forward block as one layer, y = W_down (silu(W_gate x) * (W_up x)),
// without biases (Shazeer 2020, "GLU Variants Improve Transformer", arXiv 2002.05202, §2 eq. 6, FFN_SwiGLU; LLaMA:
// Touvron et al. 2023, arXiv 2302.13971, §2 "SwiGLU activation function", where Hidden = 2/3 4 D).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>

#include "pipeprop/detail/image_dims.hpp"
#include "pipeprop/detail/sequence_dims.hpp"
#include "pipeprop/kernels/gemm.hpp"
#include "pipeprop/layer_concept.hpp"
#include "pipeprop/layers/swiglu_gate.hpp"
#include "pipeprop/parameter_tensor.hpp"
#include "pipeprop/seed.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop {

/// Stash of swiglu for one micro-batch. gate_up: [max_b L, 2 Hidden], per token the pre-activations W_gate x then
/// W_up x.
template <class T>
struct swiglu_stash {
    detail::aligned_buffer<T> gate_up;  ///< [max_b, L, 2 H]: the gate and up projections of the forward.
    std::size_t max_b = 0;  ///< The micro-batch capacity (make_stash); forward checks b against it.
};

/// Workspace of swiglu (one per runner). hidden: [max_b L, Hidden] (silu(g) u, or its gradient);
/// gate_up_gradient: [max_b L, 2 Hidden].
template <class T>
struct swiglu_workspace {
    detail::aligned_buffer<T> hidden;  ///< [max_b, L, H]: silu(gate) * up (forward and p2 scratch).
    /// [max_b, L, H]: the gradient w.r.t. the hidden activation (backward scratch).
    detail::aligned_buffer<T> hidden_gradient;
    /// [max_b, L, 2 H]: the gradient w.r.t. the gate and up projections (backward scratch).
    detail::aligned_buffer<T> gate_up_gradient;
};

/// SwiGLU feed-forward layer, bound form. Input and output [b, L, D]; the b L tokens are the rows of X [b L, D]:
///   GU = X [W_gate; W_up]^T  [bL, 2H],  g, u = the two halves of a row,  h = silu(g) * u  [bL, H],  Y = h W_down^T
/// Parameter block: W_gate [Hidden, D], W_up [Hidden, D], W_down [D, Hidden] (row-major, each as the weight of a
/// torch.nn.Linear without bias; W_gate and W_up adjacent, so they are one [2 Hidden, D] matrix and one GEMM).
/// forward:  GEMM bL x 2H x D, silu gate, GEMM bL x D x H (assigned); stashes GU.
/// p1:       dh = dY W_down; dg = dh u silu'(g), du = dh silu(g); dX = [dg, du] [W_gate; W_up]   (assigned)
/// p2:       the same dh, dg, du; d[W_gate; W_up] += [dg, du]^T X; dW_down += dY^T h                (added)
/// Init: W_gate, W_up ~ U(-1/sqrt(D), 1/sqrt(D)), W_down ~ U(-1/sqrt(Hidden), 1/sqrt(Hidden)), from the given seed.
///
/// Weights in backward-p2: the gradients of W_gate and W_up need W_down (through dh = dY W_down), so backward-p2 has
/// the weighted form of the contract (layer_concept.hpp): it receives the weights backward-p1 used (PB: the current
/// ones; synchronous schedules: the step's). The three-layer form token_linear<2 Hidden, false> - swiglu_gate -
/// token_linear<D, false> (swiglu_gate.hpp) computes the same function with the same parameters in the same order.
/// Static-asserts: the input is rank 2 [L, D]; Hidden >= 1 (in the spec).
/// Throws std::invalid_argument from forward when b is outside [1, max_b of the stash]; does not allocate after
/// make_stash / make_workspace.
template <class T, class InputShape, std::size_t Hidden>
struct swiglu_layer {
    static_assert(sequence_shape<InputShape>,
                  "pipeprop::swiglu: the input of a swiglu layer must be rank 2 [L, D], a sequence of L tokens of D "
                  "features.");
    ///@{
    /// Sequence length L, model width D and hidden width H (input and output [L, D]).
    static constexpr std::size_t sequence_length = detail::sequence_length_of<InputShape>();  // L
    static constexpr std::size_t dim = detail::feature_dim_of<InputShape>();                  // D
    static constexpr std::size_t hidden = Hidden;                                             // H
    ///@}
    /// Elements of W_gate and W_up, [2 H, D] (the head of the parameter block).
    static constexpr std::size_t gate_up_count = 2 * Hidden * dim;  // W_gate and W_up, [2 H, D]
    static constexpr std::size_t down_count = dim * Hidden;  ///< Elements of W_down, [D, H] (after W_gate and W_up).

    /// \copydoc pipeprop::layer_contract::value_type
    using value_type = T;
    /// \copydoc pipeprop::layer_contract::input_shape
    using input_shape = InputShape;
    /// \copydoc pipeprop::layer_contract::output_shape
    using output_shape = InputShape;
    /// \copydoc pipeprop::layer_contract::parameter_count
    static constexpr std::size_t parameter_count = gate_up_count + down_count;
    /// \copydoc pipeprop::layer_contract::stash_type
    using stash_type = swiglu_stash<T>;
    /// \copydoc pipeprop::layer_contract::workspace_type
    using workspace_type = swiglu_workspace<T>;

    /// \copydoc pipeprop::layer_contract::parameter_tensors
    static constexpr std::array<parameter_tensor, 3> parameter_tensors() {
        return {parameter_tensor{"w_gate", 2, {Hidden, dim, 1, 1}}, parameter_tensor{"w_up", 2, {Hidden, dim, 1, 1}},
                parameter_tensor{"w_down", 2, {dim, Hidden, 1, 1}}};
    }

    /// \copydoc pipeprop::layer_contract::make_stash
    [[nodiscard]] stash_type make_stash(std::size_t max_b) const {
        stash_type st;
        st.max_b = max_b;
        st.gate_up.assign(max_b * sequence_length * 2 * Hidden, T(0));
        return st;
    }
    /// \copydoc pipeprop::layer_contract::make_workspace
    [[nodiscard]] workspace_type make_workspace(std::size_t max_b) const {
        workspace_type ws;
        ws.hidden.assign(max_b * sequence_length * Hidden, T(0));
        ws.hidden_gradient.assign(max_b * sequence_length * Hidden, T(0));
        ws.gate_up_gradient.assign(max_b * sequence_length * 2 * Hidden, T(0));
        return ws;
    }
    /// \copydoc pipeprop::layer_contract::stash_bytes
    [[nodiscard]] std::size_t stash_bytes(const stash_type& st) const noexcept {
        return sizeof(stash_type) + st.gate_up.size() * sizeof(T);
    }
    /// \copydoc pipeprop::layer_contract::workspace_bytes
    [[nodiscard]] std::size_t workspace_bytes(const workspace_type& ws) const noexcept {
        return sizeof(workspace_type) + (ws.hidden.size() + ws.hidden_gradient.size() + ws.gate_up_gradient.size()) *
                                            sizeof(T);
    }

    /// \copydoc pipeprop::layer_contract::init_parameters
    void init_parameters(std::span<T> w, std::uint64_t seed) const {
        std::mt19937_64 rng(seed);
        const T bound_in = static_cast<T>(1.0 / std::sqrt(static_cast<double>(dim)));
        const T bound_hidden = static_cast<T>(1.0 / std::sqrt(static_cast<double>(Hidden)));
        for (std::size_t i = 0; i < gate_up_count; ++i) w[i] = uniform<T>(rng, -bound_in, bound_in);
        for (std::size_t i = gate_up_count; i < parameter_count; ++i)
            w[i] = uniform<T>(rng, -bound_hidden, bound_hidden);
    }

    /// \copydoc pipeprop::layer_contract::forward
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type& st, workspace_type& ws) const {
        detail::check_micro_batch(b, st.max_b, "pipeprop::swiglu::forward");
        const std::size_t rows = b * sequence_length;
        const T* w_gate_up = w.data();
        const T* w_down = w.data() + gate_up_count;
        T* gu = st.gate_up.data();
        kernels::gemm(false, true, rows, 2 * Hidden, dim, T(1), x, dim, w_gate_up, dim, T(0), gu, 2 * Hidden);
        detail::swiglu_gate_forward(rows, Hidden, gu, ws.hidden.data());
        kernels::gemm(false, true, rows, dim, Hidden, T(1), ws.hidden.data(), Hidden, w_down, Hidden, T(0), y, dim);
    }

    /// \copydoc pipeprop::layer_contract::backward_input
    void backward_input(std::span<const T> w, const T*, const T*, const T* dy, T* dx, std::size_t b,
                        const stash_type& st, workspace_type& ws) const {
        const std::size_t rows = b * sequence_length;
        gate_up_gradient(w.data() + gate_up_count, dy, rows, st, ws);
        kernels::gemm(false, false, rows, dim, 2 * Hidden, T(1), ws.gate_up_gradient.data(), 2 * Hidden, w.data(), dim,
                      T(0), dx, dim);
    }

    /// \copydoc pipeprop::weighted_layer_contract::backward_weight
    void backward_weight(std::span<const T> w, std::span<T> dw, const T* x, const T*, const T* dy, std::size_t b,
                         const stash_type& st, workspace_type& ws) const {
        const std::size_t rows = b * sequence_length;
        gate_up_gradient(w.data() + gate_up_count, dy, rows, st, ws);
        kernels::gemm(true, false, 2 * Hidden, dim, rows, T(1), ws.gate_up_gradient.data(), 2 * Hidden, x, dim, T(1),
                      dw.data(), dim);
        detail::swiglu_gate_forward(rows, Hidden, st.gate_up.data(), ws.hidden.data());
        kernels::gemm(true, false, dim, Hidden, rows, T(1), dy, dim, ws.hidden.data(), Hidden, T(1),
                      dw.data() + gate_up_count, Hidden);
    }

private:
    /// ws.gate_up_gradient = [dg, du] of the rows, from dh = dY W_down (into ws.hidden_gradient) and the stashed GU.
    static void gate_up_gradient(const T* w_down, const T* dy, std::size_t rows, const stash_type& st,
                                 workspace_type& ws) noexcept {
        kernels::gemm(false, false, rows, Hidden, dim, T(1), dy, dim, w_down, Hidden, T(0), ws.hidden_gradient.data(),
                      Hidden);
        detail::swiglu_gate_backward(rows, Hidden, st.gate_up.data(), ws.hidden_gradient.data(),
                                     ws.gate_up_gradient.data());
    }
};

/// SwiGLU feed-forward spec for a network list: pipeprop::swiglu<Hidden>, input and output shape<L, D>.
template <std::size_t Hidden>
struct swiglu {
    static_assert(Hidden > 0, "pipeprop::swiglu: the hidden dimension must be at least 1.");
    /// \copydoc pipeprop::layer_spec_contract::bind
    template <class T, class InputShape>
    using bind = swiglu_layer<T, InputShape, Hidden>;
};

}  // namespace pipeprop
