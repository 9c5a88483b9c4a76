// pipeprop/graph/blocks.hpp: composite blocks of a network: residual connections.
//
//   residual<Body...>                          y = x + body(x)          (identity shortcut; ResNet basic block,
//                                                                        pre-norm transformer: residual<norm, f>)
//   residual_projection<shortcut<S...>, Body...> y = g(x) + body(x)     (projection shortcut, e.g. a 1x1 stride-2
//                                                                        conv and a norm where the shape changes)
//
// Body and S are lists of layer specs (or nested blocks in the body). Shapes are checked at compile time: the body's
// output must equal the block input (identity) or the shortcut's output (projection); the failure is a sentence
// naming the block, with block_at_position<N, ...> in the trace. A network flattens a block into nodes
// (network.hpp): block_fork, the body's layers carrying the skip tensor (carried), the shortcut's layers
// (on_shortcut) and block_add. A stage boundary may fall anywhere inside the body: the skip tensor then travels
// with the main path through every boundary (docs/pb-semantics.md §6); the shortcut's layers always share
// the add's stage. Node names: "layer_03.fork", "layer_03.body_00", "layer_03.shortcut_00", "layer_03.add".
#pragma once

#include <boost/mp11/list.hpp>

#include <type_traits>

namespace pipeprop {

/// Residual block with identity shortcut: y = x + Body(x). Body: one or more layer specs or blocks.
template <class... Body>
struct residual {
    static_assert(sizeof...(Body) > 0, "pipeprop::residual: a residual block needs at least one layer in its body.");
    using body = boost::mp11::mp_list<Body...>;  ///< The body's specs, as a Boost.Mp11 list.
};

/// The layer specs of a projection shortcut (plain layers only, no blocks).
template <class... Layers>
struct shortcut {
    static_assert(sizeof...(Layers) > 0, "pipeprop::shortcut: a projection shortcut needs at least one layer.");
    using layers = boost::mp11::mp_list<Layers...>;  ///< The shortcut's layer specs, as a Boost.Mp11 list.
};

/// Residual block with a projection shortcut: y = Shortcut(x) + Body(x). Shortcut: pipeprop::shortcut<...>.
template <class Shortcut, class... Body>
struct residual_projection {
    static_assert(sizeof...(Body) > 0,
                  "pipeprop::residual_projection: a residual block needs at least one layer in its body.");
    using body = boost::mp11::mp_list<Body...>;  ///< The body's specs, as a Boost.Mp11 list.
    using shortcut_layers = typename Shortcut::layers;  ///< The shortcut's layer specs (Shortcut::layers).
};

/// A group of specs flattened in place (no shortcut): a way to name a composite, e.g. a pre-norm transformer block
/// sequence<residual<rms_norm<>, causal_self_attention<H>>, residual<rms_norm<>, swiglu<F>>>. Its entries are named
/// "layer_03.body_00", "layer_03.body_01", ...
template <class... Body>
struct sequence {
    static_assert(sizeof...(Body) > 0, "pipeprop::sequence: a sequence needs at least one entry.");
    using body = boost::mp11::mp_list<Body...>;  ///< The entries, as a Boost.Mp11 list.
};

namespace detail {
template <class S>
struct is_sequence : std::false_type {};
template <class... B>
struct is_sequence<sequence<B...>> : std::true_type {};
template <class S>
struct is_block : std::false_type {};
template <class... B>
struct is_block<residual<B...>> : std::true_type {};
template <class S, class... B>
struct is_block<residual_projection<S, B...>> : std::true_type {};
}  // namespace detail

/// True for the residual block specs above.
template <class S>
concept block_spec = detail::is_block<S>::value;
/// True for pipeprop::sequence<...>.
template <class S>
concept sequence_spec = detail::is_sequence<S>::value;

}  // namespace pipeprop
