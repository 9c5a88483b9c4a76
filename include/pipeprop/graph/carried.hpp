// pipeprop/graph/carried.hpp: a layer on the main path of a block, with the live set carried past it.
//
// Node of a flattened network (network.hpp; docs/pb-semantics.md §6). carried<L, C> runs layer L on the main
// part of its input [b x L::input] and copies the C carried elements per sample (the skip tensors of the open
// blocks) unchanged to its output; backward-p1 copies their gradients back unchanged. L's stash, workspace,
// parameters, running state and tensor names are those of the node. Buffers are tensor-major (flat_shape.hpp):
//   x = [main in: b x In][carried: b x C],  y = [main out: b x Out][carried: b x C], same for dx, dy.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "pipeprop/graph/flat_shape.hpp"
#include "pipeprop/graph/wrapped_layer.hpp"
#include "pipeprop/layer_concept.hpp"

namespace pipeprop {

/// Layer L with C carried elements per sample (C > 0; see the file comment).
template <class L, std::size_t C>
struct carried : wrapped_layer<L> {
    using base = wrapped_layer<L>;  ///< The base that exposes L's types, counts and factories.
    using T = typename L::value_type;  ///< L's value type.
    using typename base::stash_type;  ///< L's stash type.
    using typename base::workspace_type;  ///< L's workspace type.
    using base::layer;  ///< The wrapped layer L.
    using base::parameter_count;  ///< L's parameter count.
    using base::state_count;  ///< L's running-state count.
    /// Main input elements per sample (L's input size In).
    static constexpr std::size_t in_size = L::input_shape::size;
    /// Main output elements per sample (L's output size Out).
    static constexpr std::size_t out_size = L::output_shape::size;
    /// Carried elements per sample, C (the skip tensors of the open blocks).
    static constexpr std::size_t carry_size = C;
    /// Per-sample input: L's input followed by the C carried elements (flat_shape).
    using input_shape = flat_shape<typename L::input_shape, C>;
    /// Per-sample output: L's output followed by the C carried elements (flat_shape).
    using output_shape = flat_shape<typename L::output_shape, C>;

    /// Forward of a stateless L (layer_contract::forward): L's forward on x's main part [b, In] into y's [b, Out]; the
    /// carried part [b, C] is copied unchanged.
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type& st, workspace_type& ws) const
        requires(state_count == 0)
    {
        layer.forward(w, x, y, b, st, ws);
        carry_forward(x, y, b);
    }
    /// Forward of a stateful L (stateful_layer_contract::forward): as the stateless one, and L updates its running
    /// state s.
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type& st, workspace_type& ws,
                 std::span<T> s) const
        requires(state_count > 0)
    {
        layer.forward(w, x, y, b, st, ws, s);
        carry_forward(x, y, b);
    }
    /// Evaluation of a stateful L (stateful_layer_contract::infer) on the main part; the carried part is copied.
    void infer(std::span<const T> w, const T* x, T* y, std::size_t b, workspace_type& ws,
               std::span<const T> s) const
        requires(state_count > 0)
    {
        layer.infer(w, x, y, b, ws, s);
        carry_forward(x, y, b);
    }
    /// Backward-p1 of a stateless L (layer_contract::backward_input): L's dx of the main part is assigned; the carried
    /// gradients [b, C] are copied from dy unchanged.
    void backward_input(std::span<const T> w, const T* x, const T* y, const T* dy, T* dx, std::size_t b,
                        const stash_type& st, workspace_type& ws) const
        requires(state_count == 0)
    {
        layer.backward_input(w, x, y, dy, dx, b, st, ws);
        carry_backward(dy, dx, b);
    }
    /// Backward-p1 of a stateful L (stateful_layer_contract::backward_input): as the stateless one, and L updates s.
    void backward_input(std::span<const T> w, const T* x, const T* y, const T* dy, T* dx, std::size_t b,
                        const stash_type& st, workspace_type& ws, std::span<T> s) const
        requires(state_count > 0)
    {
        layer.backward_input(w, x, y, dy, dx, b, st, ws, s);
        carry_backward(dy, dx, b);
    }
    ///@{
    /// forward / backward_input of the main part only, the carried part of y / dx left as it is: for
    /// runtime_layer_stack, which copies the carried part once per run of consecutive carried nodes (the nodes of a
    /// run pass it through unchanged, so the copy from the run's input to its output is the same values).
    void forward_main(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type& st,
                      workspace_type& ws) const
        requires(state_count == 0)
    {
        layer.forward(w, x, y, b, st, ws);
    }
    void forward_main(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type& st, workspace_type& ws,
                      std::span<T> s) const
        requires(state_count > 0)
    {
        layer.forward(w, x, y, b, st, ws, s);
    }
    void backward_input_main(std::span<const T> w, const T* x, const T* y, const T* dy, T* dx, std::size_t b,
                             const stash_type& st, workspace_type& ws) const
        requires(state_count == 0)
    {
        layer.backward_input(w, x, y, dy, dx, b, st, ws);
    }
    void backward_input_main(std::span<const T> w, const T* x, const T* y, const T* dy, T* dx, std::size_t b,
                             const stash_type& st, workspace_type& ws, std::span<T> s) const
        requires(state_count > 0)
    {
        layer.backward_input(w, x, y, dy, dx, b, st, ws, s);
    }
    ///@}
    /// Backward-p2 (weighted form, weighted_layer_contract::backward_weight): L's weight gradient of the main part,
    /// added into dw; L's unweighted form is called when it declares that one.
    void backward_weight(std::span<const T> w, std::span<T> dw, const T* x, const T* y, const T* dy, std::size_t b,
                         const stash_type& st, workspace_type& ws) const
        requires(parameter_count > 0)
    {
        call_backward_weight(layer, w, dw, x, y, dy, b, st, ws);
    }

private:
    static void carry_forward(const T* x, T* y, std::size_t b) noexcept {
        std::copy_n(x + b * in_size, b * C, y + b * out_size);
    }
    static void carry_backward(const T* dy, T* dx, std::size_t b) noexcept {
        std::copy_n(dy + b * out_size, b * C, dx + b * in_size);
    }
};

}  // namespace pipeprop
