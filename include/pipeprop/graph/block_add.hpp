// pipeprop/graph/block_add.hpp: the last node of a residual block: body output + skip (or projected skip).
//
// Node of a flattened network (network.hpp). block_add<Main, C> sums the body's output and the skip tensor behind it
// (identity shortcut: the fork's copy of x; projection shortcut: g(x), computed by the on_shortcut nodes before it):
//   x = [body out: b x M][skip: b x M][carried: b x C]  ->  y = [body out + skip: b x M][carried: b x C]
// backward-p1 ASSIGNS the same gradient dy to both summands and copies the carried gradients. No parameters.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>

#include "pipeprop/graph/flat_shape.hpp"
#include "pipeprop/kernels/elementwise.hpp"
#include "pipeprop/layer_concept.hpp"

namespace pipeprop {

/// Add of a block whose output has main shape Main, with C carried elements behind it (value type T).
template <class T, class Main, std::size_t C>
struct block_add {
    using value_type = T;  ///< The arithmetic type (float or double).
    static constexpr std::size_t m = Main::size;  ///< Main elements per sample, M (the size of Main).
    using input_shape = shape<2 * m + C>;  ///< Per-sample input [2 M + C]: body output, skip tensor, carried elements.
    /// Per-sample output: Main followed by the C carried elements (flat_shape).
    using output_shape = flat_shape<Main, C>;
    static constexpr std::size_t parameter_count = 0;  ///< No parameters.

    /// y [b, M] = body output + skip; the carried part [b, C] is copied (layer_contract::forward).
    void forward(std::span<const T>, const T* x, T* y, std::size_t b, no_stash&, no_workspace&) const noexcept {
        std::copy_n(x, b * m, y);
        kernels::add(b * m, x + b * m, y);
        std::copy_n(x + 2 * b * m, b * C, y + b * m);
    }
    /// Backward-p1: dy [b, M] is ASSIGNED to the gradients of both summands; the carried gradients are copied.
    void backward_input(std::span<const T>, const T*, const T*, const T* dy, T* dx, std::size_t b, const no_stash&,
                        no_workspace&) const noexcept {
        std::copy_n(dy, b * m, dx);
        std::copy_n(dy, b * m, dx + b * m);
        std::copy_n(dy + b * m, b * C, dx + 2 * b * m);
    }
};

}  // namespace pipeprop
