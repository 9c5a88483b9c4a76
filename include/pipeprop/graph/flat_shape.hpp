// pipeprop/graph/flat_shape.hpp: the shape of a node's buffer when tensors are carried next to the main path.
//
// Inside a block, the tensor that flows between two nodes is the main-path tensor followed by the carried tensors
// (the live set: every open block's skip tensor, innermost first), stored tensor-major for a micro-batch of b
// samples: [main: b x M][carried: b x C]. The runner only needs the total per-sample size, so such a buffer has the
// rank-1 shape [M + C]; with nothing carried it keeps the main tensor's own shape.
#pragma once

#include <cstddef>
#include <type_traits>

#include "pipeprop/shape.hpp"

namespace pipeprop {

/// Main-path shape Main with Carry carried elements per sample: Main itself when Carry == 0, else shape<M + Carry>.
template <class Main, std::size_t Carry>
using flat_shape = std::conditional_t<Carry == 0, Main, shape<Main::size + Carry>>;

}  // namespace pipeprop
