// pipeprop/layers/swiglu_gate.hpp: the gated linear unit with Swish (SiLU) gate of SwiGLU (Shazeer 2020, "GLU Variants
// Improve Transformer", arXiv 2002.05202, §2 eq. 5: SwiGLU(x) = Swish_1(x W) * (x V)), the element-wise middle of
// LLaMA's feed-forward block (Touvron et al. 2023, arXiv 2302.13971, §2 "SwiGLU activation function").
//
// silu(g) = g sigmoid(g) (Swish with beta = 1; Hendrycks & Gimpel 2016, Ramachandran et al. 2017).
#pragma once

#include <cstddef>
#include <span>

#include "pipeprop/detail/sequence_dims.hpp"
#include "pipeprop/kernels/exp_kernels.hpp"
#include "pipeprop/layer_concept.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop {

namespace detail {
/// h[r, j] = silu(gu[r, j]) * gu[r, H + j] for r < rows, j < H. gu: [rows, 2H] (gate then up per row), h: [rows, H].
template <class T>
void swiglu_gate_forward(std::size_t rows, std::size_t hidden, const T* gu, T* h) noexcept {
    for (std::size_t r = 0; r < rows; ++r) {
        const T* g = gu + r * 2 * hidden;
        kernels::swiglu_gate_row(hidden, g, g + hidden, h + r * hidden);
    }
}

/// Backward of swiglu_gate_forward: with s = sigmoid(g),
///   dgu[r, j]     = dh[r, j] u s (1 + g (1 - s))   (d silu(g) / dg = s (1 + g (1 - s)))
///   dgu[r, H + j] = dh[r, j] silu(g)
/// gu, dgu: [rows, 2H]; dh: [rows, H]. dgu is assigned.
template <class T>
void swiglu_gate_backward(std::size_t rows, std::size_t hidden, const T* gu, const T* dh, T* dgu) noexcept {
    for (std::size_t r = 0; r < rows; ++r) {
        const T* g = gu + r * 2 * hidden;
        T* dg = dgu + r * 2 * hidden;
        kernels::swiglu_gate_row_backward(hidden, g, g + hidden, dh + r * hidden, dg, dg + hidden);
    }
}
}  // namespace detail

/// SwiGLU gate, bound form (parameter-free). Input [b, L, 2 H]: per token the gate pre-activations g [H] followed by
/// the up projections u [H] (what token_linear<2 H, false> gives with weight [W_gate; W_up]); output [b, L, H]:
///   h_j = silu(g_j) u_j.
/// p1 (assigned): dg_j = dh_j u_j s_j (1 + g_j (1 - s_j)), du_j = dh_j silu(g_j), s = sigmoid(g).
/// With it, token_linear<2 H, false> - swiglu_gate - token_linear<D, false> is LLaMA's feed-forward block as three
/// layers whose backward passes all use the weights they are given (the one-layer pipeprop::swiglu stashes W_down for
/// its backward-p2, see swiglu.hpp).
/// Static-asserts: the input is rank 2 [L, 2 H] with an even number of features.
/// No stash (p1 reads x), no workspace; nothing allocates; throws nothing.
template <class T, class InputShape>
struct swiglu_gate_layer {
    static_assert(sequence_shape<InputShape>,
                  "pipeprop::swiglu_gate: the input of a swiglu_gate layer must be rank 2 [L, 2 H], a sequence of L "
                  "tokens of gate and up projections.");
    static_assert(detail::feature_dim_of<InputShape>() % 2 == 0,
                  "pipeprop::swiglu_gate: the number of input features must be even: H gate values followed by H up "
                  "values per token.");
    /// Sequence length L of the input [L, 2 H].
    static constexpr std::size_t sequence_length = detail::sequence_length_of<InputShape>();
    /// Hidden width H: half the input features (gate, then up); the output is [L, H].
    static constexpr std::size_t hidden = detail::feature_dim_of<InputShape>() / 2 > 0
                                              ? detail::feature_dim_of<InputShape>() / 2
                                              : 1;  // H (1 after a failed assert, so the class stays well-formed)

    /// \copydoc pipeprop::layer_contract::value_type
    using value_type = T;
    /// \copydoc pipeprop::layer_contract::input_shape
    using input_shape = InputShape;
    /// \copydoc pipeprop::layer_contract::output_shape
    using output_shape = shape<sequence_length, hidden>;
    /// \copydoc pipeprop::layer_contract::parameter_count
    static constexpr std::size_t parameter_count = 0;
    /// \copydoc pipeprop::layer_contract::stash_type
    using stash_type = no_stash;
    /// \copydoc pipeprop::layer_contract::workspace_type
    using workspace_type = no_workspace;

    /// \copydoc pipeprop::layer_contract::forward
    void forward(std::span<const T>, const T* x, T* y, std::size_t b, stash_type&, workspace_type&) const {
        detail::swiglu_gate_forward(b * sequence_length, hidden, x, y);
    }

    /// \copydoc pipeprop::layer_contract::backward_input
    void backward_input(std::span<const T>, const T* x, const T*, const T* dy, T* dx, std::size_t b, const stash_type&,
                        workspace_type&) const {
        detail::swiglu_gate_backward(b * sequence_length, hidden, x, dy, dx);
    }
};

/// SwiGLU gate spec for a network list: pipeprop::swiglu_gate, input shape<L, 2 H>, output shape<L, H>.
struct swiglu_gate {
    /// \copydoc pipeprop::layer_spec_contract::bind
    template <class T, class InputShape>
    using bind = swiglu_gate_layer<T, InputShape>;
};

}  // namespace pipeprop
