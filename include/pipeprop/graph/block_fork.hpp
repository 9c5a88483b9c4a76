// pipeprop/graph/block_fork.hpp: the first node of a residual block: its input goes to the body and to the shortcut.
//
// Node of a flattened network (network.hpp). block_fork<Main, C> duplicates the main tensor x [b x M]: the copy in front is
// the body's input, the copy behind it is the block's skip tensor, carried through the body (and across stage
// boundaries: docs/pb-semantics.md §6) until the block's add. C further carried elements per sample follow unchanged.
//   x = [x: b x M][carried: b x C]  ->  y = [x: b x M][skip = x: b x M][carried: b x C]
// x has two consumers, so backward-p1 ASSIGNS dx = dy_body + dy_skip (the runner's gradient sum of a tensor used
// twice: docs/pitfalls.md item 4) and copies the carried gradients. No parameters, no stash.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>

#include "pipeprop/graph/flat_shape.hpp"
#include "pipeprop/kernels/elementwise.hpp"
#include "pipeprop/layer_concept.hpp"

namespace pipeprop {

/// Fork of a block whose input has main shape Main, with C carried elements behind it (value type T).
template <class T, class Main, std::size_t C>
struct block_fork {
    using value_type = T;  ///< The arithmetic type (float or double).
    static constexpr std::size_t m = Main::size;  ///< Main elements per sample, M (the size of Main).
    /// Per-sample input: Main followed by the C carried elements (flat_shape).
    using input_shape = flat_shape<Main, C>;
    /// Per-sample output [2 M + C]: x for the body, x again as the skip tensor, carried elements.
    using output_shape = shape<2 * m + C>;
    static constexpr std::size_t parameter_count = 0;  ///< No parameters.

    /// Copies x [b, M] to the body input and to the skip tensor; the carried part [b, C] follows unchanged.
    void forward(std::span<const T>, const T* x, T* y, std::size_t b, no_stash&, no_workspace&) const noexcept {
        std::copy_n(x, b * m, y);
        std::copy_n(x, b * m, y + b * m);
        std::copy_n(x + b * m, b * C, y + 2 * b * m);
    }
    /// Backward-p1: dx [b, M] = dy_body + dy_skip is ASSIGNED (x has two consumers); the carried gradients are copied.
    void backward_input(std::span<const T>, const T*, const T*, const T* dy, T* dx, std::size_t b, const no_stash&,
                        no_workspace&) const noexcept {
        std::copy_n(dy, b * m, dx);
        kernels::add(b * m, dy + b * m, dx);
        std::copy_n(dy + 2 * b * m, b * C, dx + b * m);
    }
};

}  // namespace pipeprop
