// pipeprop/detail/image_dims.hpp: helpers shared by the image layers (conv2d, pools, group_norm): dimension access
// that stays well-formed on a shape of the wrong rank (so a layer's own static_assert sentence is the only
// diagnostic), the aligned buffer type of their stashes and workspaces, and the micro-batch capacity check.
#pragma once

#include <xsimd/memory/xsimd_aligned_allocator.hpp>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/shape.hpp"

namespace pipeprop::detail {

/// Dimension I of shape S, or 1 when S has no dimension I (used only after a rank static_assert has fired or
/// passed, to keep the rest of the class well-formed).
template <class S, std::size_t I>
[[nodiscard]] constexpr std::size_t dim_or_one() noexcept {
    if constexpr (I < S::rank)
        return S::dims[I];
    else
        return 1;
}

/// SIMD-aligned storage for the per-micro-batch stashes and per-runner workspaces of the image layers.
template <class T>
using aligned_buffer = std::vector<T, xsimd::aligned_allocator<T>>;

/// Throws std::invalid_argument when a micro-batch of b samples does not fit a stash made for capacity samples.
/// `where` names the layer and function, e.g. "pipeprop::conv2d::forward".
inline void check_micro_batch(std::size_t b, std::size_t capacity, const char* where) {
    if (b == 0 || b > capacity)
        throw std::invalid_argument(std::string(where) + ": micro-batch size b = " + std::to_string(b) +
                                    " is outside [1, " + std::to_string(capacity) +
                                    "], the max_b the stash was made for");
}

}  // namespace pipeprop::detail
