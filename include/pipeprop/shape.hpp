// pipeprop/shape.hpp: compile-time per-sample tensor shapes.
//
// A shape names the dimensions of ONE sample; every tensor that crosses a layer or a stage boundary has the
// micro-batch dimension b in front: [b, Dims...], row-major, contiguous.
#pragma once

#include <array>
#include <cstddef>
#include <type_traits>

namespace pipeprop {

/// Per-sample shape known at compile time, e.g. shape<1, 28, 28> for a one-channel 28x28 image [C, H, W] and
/// shape<10> for ten logits. `size` is the number of elements of one sample (the product of the dimensions).
template <std::size_t... Dims>
struct shape {
    static_assert(sizeof...(Dims) > 0, "pipeprop::shape: a shape needs at least one dimension.");
    static_assert(((Dims > 0) && ...), "pipeprop::shape: every dimension of a shape must be at least 1.");
    static constexpr std::size_t rank = sizeof...(Dims);  ///< Number of dimensions.
    static constexpr std::size_t size = (Dims * ...);  ///< Elements of one sample: the product of the dimensions.
    static constexpr std::array<std::size_t, rank> dims{Dims...};  ///< The dimensions, outermost first.
};

namespace detail {
template <class S>
struct is_shape : std::false_type {};
template <std::size_t... D>
struct is_shape<shape<D...>> : std::true_type {};
}  // namespace detail

/// True for pipeprop::shape<...> types.
template <class S>
concept shape_type = detail::is_shape<S>::value;

/// Rank-3 shape [C, H, W] as used by the image layers (conv2d, pools, group_norm).
template <class S>
concept image_shape = shape_type<S> && S::rank == 3;

/// Rank-1 shape [N] as used by dense and the loss.
template <class S>
concept vector_shape = shape_type<S> && S::rank == 1;

}  // namespace pipeprop
