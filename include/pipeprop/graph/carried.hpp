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
    using base = wrapped_layer<L>;
    using T = typename L::value_type;
    using typename base::stash_type;
    using typename base::workspace_type;
    using base::layer;
    using base::parameter_count;
    using base::state_count;
    static constexpr std::size_t in_size = L::input_shape::size;
    static constexpr std::size_t out_size = L::output_shape::size;
    static constexpr std::size_t carry_size = C;
    using input_shape = flat_shape<typename L::input_shape, C>;
    using output_shape = flat_shape<typename L::output_shape, C>;

    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type& st, workspace_type& ws) const
        requires(state_count == 0)
    {
        layer.forward(w, x, y, b, st, ws);
        carry_forward(x, y, b);
    }
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type& st, workspace_type& ws,
                 std::span<T> s) const
        requires(state_count > 0)
    {
        layer.forward(w, x, y, b, st, ws, s);
        carry_forward(x, y, b);
    }
    void infer(std::span<const T> w, const T* x, T* y, std::size_t b, workspace_type& ws,
               std::span<const T> s) const
        requires(state_count > 0)
    {
        layer.infer(w, x, y, b, ws, s);
        carry_forward(x, y, b);
    }
    void backward_input(std::span<const T> w, const T* x, const T* y, const T* dy, T* dx, std::size_t b,
                        const stash_type& st, workspace_type& ws) const
        requires(state_count == 0)
    {
        layer.backward_input(w, x, y, dy, dx, b, st, ws);
        carry_backward(dy, dx, b);
    }
    void backward_input(std::span<const T> w, const T* x, const T* y, const T* dy, T* dx, std::size_t b,
                        const stash_type& st, workspace_type& ws, std::span<T> s) const
        requires(state_count > 0)
    {
        layer.backward_input(w, x, y, dy, dx, b, st, ws, s);
        carry_backward(dy, dx, b);
    }
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
