// pipeprop/layers/token_linear.hpp: a linear map applied to every token of a sequence (torch.nn.Linear on [b, L, In]),
// the projections and the LM head of a LLaMA-like transformer (Touvron et al. 2023, "LLaMA: Open and Efficient
// Foundation Language Models", arXiv 2302.13971, §2: the LM head is token_linear<Vocab, false>).
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>

#include "pipeprop/detail/sequence_dims.hpp"
#include "pipeprop/kernels/elementwise.hpp"
#include "pipeprop/kernels/gemm.hpp"
#include "pipeprop/layer_concept.hpp"
#include "pipeprop/parameter_tensor.hpp"
#include "pipeprop/seed.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop {

/// Token-wise linear layer, bound form. Input [b, L, In], output [b, L, Out]; the b L tokens of a micro-batch are the
/// rows of ONE matrix X [b L, In], so each pass is one GEMM through kernels::gemm (no per-sample loop).
/// Parameter block: weight [Out, In] (row-major, as torch.nn.Linear.weight) followed by bias [Out] when Bias.
/// forward:  Y = X W^T (+ bias on every row)              (GEMM bL x Out x In; assigned)
/// p1:       dX = dY W                                     (GEMM bL x In x Out; assigned)
/// p2:       dW += dY^T X ; dbias += sum over the b L rows of dY   (GEMM Out x In x bL; added)
/// Init: weight ~ U(-1/sqrt(In), 1/sqrt(In)) (the bound of torch.nn.Linear's default init), bias = 0, from the given
/// seed.
/// Static-asserts: the input is rank 2 [L, In] (a sequence of tokens; use pipeprop::dense for rank-1 features).
/// No stash, no workspace; nothing allocates; throws nothing.
template <class T, class InputShape, std::size_t Out, bool Bias>
struct token_linear_layer {
    static_assert(sequence_shape<InputShape>,
                  "pipeprop::token_linear: the input of a token_linear layer must be rank 2 [L, features], a sequence "
                  "of L tokens; use pipeprop::dense for a rank-1 input.");
    ///@{
    /// Sequence length L, input features In and output features Out (input [L, In], output [L, Out]).
    static constexpr std::size_t sequence_length = detail::sequence_length_of<InputShape>();  // L
    static constexpr std::size_t in = detail::feature_dim_of<InputShape>();
    static constexpr std::size_t out = Out;
    ///@}
    /// Whether the parameter block ends with a bias [Out].
    static constexpr bool has_bias = Bias;

    /// \copydoc pipeprop::layer_contract::value_type
    using value_type = T;
    /// \copydoc pipeprop::layer_contract::input_shape
    using input_shape = InputShape;
    /// \copydoc pipeprop::layer_contract::output_shape
    using output_shape = shape<sequence_length, Out>;
    /// Elements of the weight [Out, In] (the head of the parameter block).
    static constexpr std::size_t weight_count = out * in;
    /// \copydoc pipeprop::layer_contract::parameter_count
    static constexpr std::size_t parameter_count = weight_count + (Bias ? out : 0);
    /// \copydoc pipeprop::layer_contract::stash_type
    using stash_type = no_stash;
    /// \copydoc pipeprop::layer_contract::workspace_type
    using workspace_type = no_workspace;

    static constexpr auto parameter_tensors() {  ///< \copydoc pipeprop::layer_contract::parameter_tensors
        if constexpr (Bias)
            return std::array<parameter_tensor, 2>{parameter_tensor{"weight", 2, {out, in, 1, 1}},
                                                   parameter_tensor{"bias", 1, {out, 1, 1, 1}}};
        else
            return std::array<parameter_tensor, 1>{parameter_tensor{"weight", 2, {out, in, 1, 1}}};
    }

    /// \copydoc pipeprop::layer_contract::init_parameters
    void init_parameters(std::span<T> w, std::uint64_t seed) const {
        std::mt19937_64 rng(seed);
        const T bound = static_cast<T>(1.0 / std::sqrt(static_cast<double>(in)));
        for (std::size_t i = 0; i < weight_count; ++i) w[i] = uniform<T>(rng, -bound, bound);
        for (std::size_t i = weight_count; i < parameter_count; ++i) w[i] = T(0);
    }

    /// \copydoc pipeprop::layer_contract::forward
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type&, workspace_type&) const {
        const std::size_t rows = b * sequence_length;
        if constexpr (Bias) {
            const T* bias = w.data() + weight_count;
            for (std::size_t r = 0; r < rows; ++r) kernels::copy(out, bias, y + r * out);
        }
        kernels::gemm(false, true, rows, out, in, T(1), x, in, w.data(), in, Bias ? T(1) : T(0), y, out);
    }

    /// \copydoc pipeprop::layer_contract::backward_input
    void backward_input(std::span<const T> w, const T*, const T*, const T* dy, T* dx, std::size_t b, const stash_type&,
                        workspace_type&) const {
        kernels::gemm(false, false, b * sequence_length, in, out, T(1), dy, out, w.data(), in, T(0), dx, in);
    }

    /// \copydoc pipeprop::layer_contract::backward_weight
    void backward_weight(std::span<T> dw, const T* x, const T*, const T* dy, std::size_t b, const stash_type&,
                         workspace_type&) const {
        const std::size_t rows = b * sequence_length;
        kernels::gemm(true, false, out, in, rows, T(1), dy, out, x, in, T(1), dw.data(), in);
        if constexpr (Bias) {
            T* dbias = dw.data() + weight_count;
            for (std::size_t r = 0; r < rows; ++r) kernels::add(out, dy + r * out, dbias);
        }
    }
};

/// Token-wise linear layer spec for a network list: pipeprop::token_linear<Out> (with bias) or
/// pipeprop::token_linear<Out, false> (without; LLaMA's projections and LM head, token_linear<Vocab, false>).
/// Input shape<L, In>, output shape<L, Out>.
template <std::size_t Out, bool Bias = true>
struct token_linear {
    static_assert(Out > 0, "pipeprop::token_linear: the number of outputs per token must be at least 1.");
    /// \copydoc pipeprop::layer_spec_contract::bind
    template <class T, class InputShape>
    using bind = token_linear_layer<T, InputShape, Out, Bias>;
};

}  // namespace pipeprop
