// pipeprop/graph/on_shortcut.hpp: a layer of a block's projection shortcut, applied to the carried skip tensor.
//
// Node of a flattened network (network.hpp). A projection block y = g(x) + f(x) is flattened to
// fork, f's layers (carried<...>), g's layers (on_shortcut<...>), add. on_shortcut<L, F, C> sees the body output
// in front (F elements per sample), the skip tensor that L transforms, then C further carried elements:
//   x = [body out: b x F][skip in: b x In][carried: b x C]  ->  y = [body out: b x F][skip out: b x Out][carried]
// Only L's part changes; the rest is copied forward (and its gradient backward) unchanged. The node always shares a
// stage with its block's add (docs/pb-semantics.md §6: the shortcut's parameters belong to the stage of the add and get
// that stage's delay), so pipeline partitions never cut before it (cut_allowed_before == false).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "pipeprop/graph/wrapped_layer.hpp"
#include "pipeprop/layer_concept.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop {

/// Layer L applied to the skip tensor behind F front elements, with C elements carried behind it.
template <class L, std::size_t F, std::size_t C>
struct on_shortcut : wrapped_layer<L> {
    using base = wrapped_layer<L>;  ///< The base that exposes L's types, counts and factories.
    using T = typename L::value_type;  ///< L's value type.
    using typename base::stash_type;  ///< L's stash type.
    using typename base::workspace_type;  ///< L's workspace type.
    using base::layer;  ///< The wrapped layer L.
    using base::parameter_count;  ///< L's parameter count.
    using base::state_count;  ///< L's running-state count.
    /// Skip-tensor elements per sample that L reads (L's input size In).
    static constexpr std::size_t in_size = L::input_shape::size;
    /// Skip-tensor elements per sample that L writes (L's output size Out).
    static constexpr std::size_t out_size = L::output_shape::size;
    /// Per-sample input [F + In + C]: body output, skip tensor, carried elements.
    using input_shape = shape<F + in_size + C>;
    /// Per-sample output [F + Out + C]: body output, transformed skip tensor, carried elements.
    using output_shape = shape<F + out_size + C>;
    /// Partitions may not put a stage boundary in front of this node (see the file comment).
    static constexpr bool cut_allowed_before = false;

    /// Forward of a stateless L (layer_contract::forward): L's forward on the skip part [b, In] into [b, Out]; the body
    /// output [b, F] and the carried part [b, C] are copied unchanged.
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type& st, workspace_type& ws) const
        requires(state_count == 0)
    {
        layer.forward(w, x + b * F, y + b * F, b, st, ws);
        pass_forward(x, y, b);
    }
    /// Forward of a stateful L (stateful_layer_contract::forward): as the stateless one, and L updates its running
    /// state s.
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type& st, workspace_type& ws,
                 std::span<T> s) const
        requires(state_count > 0)
    {
        layer.forward(w, x + b * F, y + b * F, b, st, ws, s);
        pass_forward(x, y, b);
    }
    /// Evaluation of a stateful L (stateful_layer_contract::infer) on the skip part; the rest is copied.
    void infer(std::span<const T> w, const T* x, T* y, std::size_t b, workspace_type& ws,
               std::span<const T> s) const
        requires(state_count > 0)
    {
        layer.infer(w, x + b * F, y + b * F, b, ws, s);
        pass_forward(x, y, b);
    }
    /// Backward-p1 of a stateless L (layer_contract::backward_input): L's dx of the skip part is assigned; the
    /// gradients of the body output and the carried part are copied from dy unchanged.
    void backward_input(std::span<const T> w, const T* x, const T* y, const T* dy, T* dx, std::size_t b,
                        const stash_type& st, workspace_type& ws) const
        requires(state_count == 0)
    {
        layer.backward_input(w, x + b * F, y + b * F, dy + b * F, dx + b * F, b, st, ws);
        pass_backward(dy, dx, b);
    }
    /// Backward-p1 of a stateful L (stateful_layer_contract::backward_input): as the stateless one, and L updates s.
    void backward_input(std::span<const T> w, const T* x, const T* y, const T* dy, T* dx, std::size_t b,
                        const stash_type& st, workspace_type& ws, std::span<T> s) const
        requires(state_count > 0)
    {
        layer.backward_input(w, x + b * F, y + b * F, dy + b * F, dx + b * F, b, st, ws, s);
        pass_backward(dy, dx, b);
    }
    /// Backward-p2 (weighted form, weighted_layer_contract::backward_weight): L's weight gradient of the skip part,
    /// added into dw.
    void backward_weight(std::span<const T> w, std::span<T> dw, const T* x, const T* y, const T* dy, std::size_t b,
                         const stash_type& st, workspace_type& ws) const
        requires(parameter_count > 0)
    {
        call_backward_weight(layer, w, dw, x + b * F, y + b * F, dy + b * F, b, st, ws);
    }

private:
    static void pass_forward(const T* x, T* y, std::size_t b) noexcept {
        std::copy_n(x, b * F, y);
        std::copy_n(x + b * (F + in_size), b * C, y + b * (F + out_size));
    }
    static void pass_backward(const T* dy, T* dx, std::size_t b) noexcept {
        std::copy_n(dy, b * F, dx);
        std::copy_n(dy + b * (F + out_size), b * C, dx + b * (F + in_size));
    }
};

}  // namespace pipeprop
