// pipeprop/detail/sequence_dims.hpp: shape helpers of the sequence layers (token_linear, rms_norm, swiglu), whose
// per-sample tensors are rank 2 [L, D]: L tokens of D features (layer_concept.hpp, "rank 2 [L, D]").
#pragma once

#include <cstddef>

#include "pipeprop/shape.hpp"

namespace pipeprop {

/// Rank-2 shape [L, D] as used by the transformer layers: a sequence of L tokens of D features each.
template <class S>
concept sequence_shape = shape_type<S> && S::rank == 2;

namespace detail {
/// L of a sequence shape [L, D], or 1 for another rank (so that a layer's rank static_assert is the only diagnostic).
template <class S>
[[nodiscard]] constexpr std::size_t sequence_length_of() noexcept {
    if constexpr (sequence_shape<S>)
        return S::dims[0];
    else
        return 1;
}
/// D of a sequence shape [L, D], or 1 for another rank.
template <class S>
[[nodiscard]] constexpr std::size_t feature_dim_of() noexcept {
    if constexpr (sequence_shape<S>)
        return S::dims[1];
    else
        return 1;
}
}  // namespace detail

}  // namespace pipeprop
