// pipeprop/layers/dense.hpp: fully connected layer y = x W^T + bias.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>

#include "pipeprop/kernels/gemm.hpp"
#include "pipeprop/layer_concept.hpp"
#include "pipeprop/optim/momentum_update.hpp"
#include "pipeprop/parameter_tensor.hpp"
#include "pipeprop/seed.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop {

/// Dense (fully connected) layer, bound form. Input [b, In], output [b, Out].
/// Parameter block: weight [Out, In] (row-major) followed by bias [Out].
/// forward:  y = x W^T + bias                    (GEMM b x Out x In)
/// p1:       dx = dy W                           (GEMM b x In x Out; assigned)
/// p2:       dW += dy^T x ; dbias += sum_b dy    (GEMM Out x In x b; added)
/// Init: weight ~ U(-sqrt(6/In), sqrt(6/In)) (He uniform), bias = 0, from the given seed.
/// Static-asserts that the input is rank 1 (put pipeprop::flatten before a dense layer that follows images).
template <class T, class InputShape, std::size_t Out>
struct dense_layer {
    static_assert(vector_shape<InputShape>,
                  "pipeprop::dense: the input of a dense layer must be rank 1 [features]; put pipeprop::flatten "
                  "before it.");
    /// \copydoc pipeprop::layer_contract::value_type
    using value_type = T;
    /// \copydoc pipeprop::layer_contract::input_shape
    using input_shape = InputShape;
    /// \copydoc pipeprop::layer_contract::output_shape
    using output_shape = shape<Out>;
    ///@{
    /// Input features In (the size of the rank-1 input) and output features Out.
    static constexpr std::size_t in = InputShape::size;
    static constexpr std::size_t out = Out;
    ///@}
    /// \copydoc pipeprop::layer_contract::parameter_count
    static constexpr std::size_t parameter_count = out * in + out;
    /// \copydoc pipeprop::layer_contract::stash_type
    using stash_type = no_stash;
    /// \copydoc pipeprop::layer_contract::workspace_type
    using workspace_type = no_workspace;

    /// \copydoc pipeprop::layer_contract::parameter_tensors
    static constexpr std::array<parameter_tensor, 2> parameter_tensors() {
        return {parameter_tensor{"weight", 2, {out, in, 1, 1}}, parameter_tensor{"bias", 1, {out, 1, 1, 1}}};
    }

    /// \copydoc pipeprop::layer_contract::init_parameters
    void init_parameters(std::span<T> w, std::uint64_t seed) const {
        std::mt19937_64 rng(seed);
        const T bound = static_cast<T>(std::sqrt(6.0 / static_cast<double>(in)));
        for (std::size_t i = 0; i < out * in; ++i) w[i] = uniform<T>(rng, -bound, bound);
        for (std::size_t i = out * in; i < parameter_count; ++i) w[i] = T(0);
    }

    /// \copydoc pipeprop::layer_contract::forward
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type&, workspace_type&) const {
        const T* bias = w.data() + out * in;
        for (std::size_t n = 0; n < b; ++n)
            for (std::size_t o = 0; o < out; ++o) y[n * out + o] = bias[o];
        kernels::gemm(false, true, b, out, in, T(1), x, in, w.data(), in, T(1), y, out);
    }

    /// \copydoc pipeprop::layer_contract::backward_input
    void backward_input(std::span<const T> w, const T*, const T*, const T* dy, T* dx, std::size_t b,
                        const stash_type&, workspace_type&) const {
        kernels::gemm(false, false, b, in, out, T(1), dy, out, w.data(), in, T(0), dx, in);
    }

    /// \copydoc pipeprop::layer_contract::backward_weight
    void backward_weight(std::span<T> dw, const T* x, const T*, const T* dy, std::size_t b, const stash_type&,
                         workspace_type&) const {
        kernels::gemm(true, false, out, in, b, T(1), dy, out, x, in, T(1), dw.data(), in);
        T* dbias = dw.data() + out * in;
        for (std::size_t n = 0; n < b; ++n)
            for (std::size_t o = 0; o < out; ++o) dbias[o] += dy[n * out + o];
    }

    /// Backward-p2 of ONE sample (b = 1) fused into the momentum update: w [P] and its velocity
    /// v [P] are updated in place with the gradient dW = dy x^T, dbias = dy, which is never stored (x [1, In],
    /// dy [1, Out]). The same bits as backward_weight into a zeroed gradient followed by optim::momentum_update
    /// with c (test_layers_fused_update).
    void backward_weight_momentum_update(std::span<T> w, std::span<T> v, const T* x, const T* dy,
                                         const optim::update_coefficients<T>& c) const noexcept {
        optim::momentum_update_outer(out, in, w.data(), v.data(), dy, x, c);
        T* wb = w.data() + out * in;
        T* vb = v.data() + out * in;
        const T bd = c.b_decay * c.weight_decay;
        for (std::size_t o = 0; o < out; ++o)  // dbias = 0 + dy, as p2 adds it into a zeroed gradient
            optim::detail::momentum_element(wb[o], vb[o], T(0) + dy[o], c.momentum, c.weight_decay, c.learning_rate,
                                            c.a, c.b_loss, bd);
    }
};

/// Dense layer spec for a network list: pipeprop::dense<Out>.
template <std::size_t Out>
struct dense {
    static_assert(Out > 0, "pipeprop::dense: the number of outputs must be at least 1.");
    /// \copydoc pipeprop::layer_spec_contract::bind
    template <class T, class InputShape>
    using bind = dense_layer<T, InputShape, Out>;
};

}  // namespace pipeprop
