// pipeprop/network.hpp: a network is a compile-time list of layer specs and blocks plus the per-sample input shape.
//
//   using cnn = pipeprop::network<pipeprop::shape<1, 28, 28>,
//                                 pipeprop::conv2d<16, 3, 1, 1>, pipeprop::relu, pipeprop::flatten, pipeprop::dense<10>>;
//
// Each spec is bound to a value type T and to the output shape of the layer before it through the nested template
// `Spec::template bind<T, InputShape>`; a type without `bind` is taken as an already-concrete layer, whose
// input_shape must then equal the previous output shape. Every bound layer is checked against the layer concept
// (layer_concept.hpp) at compile time; a failure is a static_assert sentence, and the compiler's instantiation
// trace shows `layer_at_position<N, Spec, ...>`: N is the 0-based position of the offending layer in the list.
#pragma once

#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>
#include <cstddef>
#include <type_traits>

#include "pipeprop/graph/block_add.hpp"
#include "pipeprop/graph/block_fork.hpp"
#include "pipeprop/graph/blocks.hpp"
#include "pipeprop/graph/carried.hpp"
#include "pipeprop/graph/node_path.hpp"
#include "pipeprop/graph/on_shortcut.hpp"
#include "pipeprop/layer_concept.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop {

namespace detail {

template <class Spec, class T, class In>
concept spec_with_bind = requires { typename Spec::template bind<T, In>; };

template <class Spec, class T, class In>
struct bound_type {
    using type = Spec;
};
template <class Spec, class T, class In>
    requires spec_with_bind<Spec, T, In>
struct bound_type<Spec, T, In> {
    using type = typename Spec::template bind<T, In>;
};

template <class L, class In>
concept input_matches = layer_has_shapes<L> && std::is_same_v<typename L::input_shape, In>;
template <class L, class T>
concept value_type_matches = layer_has_shapes<L> && std::is_same_v<typename L::value_type, T>;

}  // namespace detail

/// Compile-time check of the layer at 0-based position Position of a network (value type T, input shape In).
/// `type` is the bound layer. The static_asserts below are the diagnostics a user sees; this struct's name and
/// arguments in the instantiation trace tell which position and which spec failed.
template <std::size_t Position, class Spec, class T, class In, class Path = void>
struct layer_at_position {
    /// The layer Spec bound to T and In (Spec::bind<T, In>, or Spec itself when it is a concrete layer).
    using type = typename detail::bound_type<Spec, T, In>::type;

    ///@{
    /// The checks of the bound layer, each followed by the static_assert that says what it requires: declared shapes,
    /// value type T, input shape In, parameter count, the stateful or stateless passes, backward-p2 and init_parameters
    /// when it has parameters; a check is vacuously true when an earlier one failed, so that only the first failure is
    /// reported. ok: all of them.
    static constexpr bool shapes_ok = layer_has_shapes<type>;
    static_assert(shapes_ok,
                  "pipeprop: this layer does not declare value_type (a floating-point type), input_shape and "
                  "output_shape (pipeprop::shape types); see layer_at_position<N, ...> below for its position N.");
    static constexpr bool value_ok = !shapes_ok || detail::value_type_matches<type, T>;
    static_assert(value_ok, "pipeprop: this layer's value_type differs from the network's value type; give the "
                            "layer a nested template bind<T, InputShape> so it can be bound to float and double.");
    static constexpr bool input_ok = !shapes_ok || detail::input_matches<type, In>;
    static_assert(input_ok, "pipeprop: this layer's input_shape does not match the output shape of the layer before "
                            "it (or the network input shape for position 0).");
    static constexpr bool count_ok = !shapes_ok || layer_has_parameter_count<type>;
    static_assert(count_ok, "pipeprop: this layer does not declare a compile-time `static constexpr std::size_t "
                            "parameter_count` (0 for a parameter-free layer).");
    static constexpr bool stateful = shapes_ok && layer_declares_state<type>;
    static constexpr bool state_ok = !stateful || layer_has_state_passes<type>;
    static_assert(state_ok, "pipeprop: this layer declares state_count (a running-state block) but lacks one of "
                            "the stateful passes `forward(w, x, y, b, stash&, ws&, std::span<T> state)`, "
                            "`backward_input(w, x, y, dy, dx, b, const stash&, ws&, std::span<T> state)`, "
                            "`infer(w, x, y, b, ws&, std::span<const T> state)`, `init_state(std::span<T>)`.");
    static constexpr bool forward_ok = !(shapes_ok && count_ok) || stateful || layer_has_forward<type>;
    static_assert(forward_ok, "pipeprop: this layer has no member `void forward(std::span<const T> w, const T* x, T* y, "
                              "std::size_t b, stash_type&, workspace_type&) const`.");
    static constexpr bool p1_ok = !(shapes_ok && count_ok) || stateful || layer_has_backward_input<type>;
    static_assert(p1_ok, "pipeprop: this layer has no backward-p1 member `void backward_input(std::span<const T> w, "
                         "const T* x, const T* y, const T* dy, T* dx, std::size_t b, const stash_type&, "
                         "workspace_type&) const`.");
    static constexpr bool p2_ok = !(shapes_ok && count_ok) || type::parameter_count == 0 ||
                                  layer_has_backward_weight<type> || layer_has_weighted_backward_weight<type>;
    static_assert(p2_ok, "pipeprop: this layer has parameters but no backward-p2 member `void backward_weight("
                         "std::span<T> dw, const T* x, const T* y, const T* dy, std::size_t b, const stash_type&, "
                         "workspace_type&) const`.");
    static constexpr bool init_ok = !(shapes_ok && count_ok) || type::parameter_count == 0 || layer_has_init<type>;
    static_assert(init_ok, "pipeprop: this layer has parameters but no member `void init_parameters(std::span<T> w, "
                           "std::uint64_t seed) const`.");
    static constexpr bool ok =
        shapes_ok && value_ok && input_ok && count_ok && state_ok && forward_ok && p1_ok && p2_ok && init_ok;
    ///@}
};

/// Compile-time check of the residual block at 0-based position Position of its level (value type T, block input
/// shape In, body output BodyOut, shortcut output ShortcutOut: In for an identity shortcut). Path names the block
/// (node_path.hpp). The static_asserts are the diagnostics a user sees.
template <std::size_t Position, class Block, class T, class In, class BodyOut, class ShortcutOut, class Path = void>
struct block_at_position {
    ///@{
    /// The checks of the block, each followed by the static_assert that reports it: identity (no shortcut layers) and
    /// then body output == block input, or a projection and then body output == shortcut output; ok: both hold.
    static constexpr bool identity = !requires { typename Block::shortcut_layers; };
    static constexpr bool identity_ok = !identity || std::is_same_v<BodyOut, In>;
    static_assert(identity_ok, "pipeprop::residual: the body's output shape differs from the block's input shape; an "
                               "identity shortcut needs equal shapes (use residual_projection with a shortcut that "
                               "maps the input to the body's output shape); see block_at_position<N, ...> below.");
    static constexpr bool projection_ok = identity || std::is_same_v<BodyOut, ShortcutOut>;
    static_assert(projection_ok, "pipeprop::residual_projection: the shortcut's output shape differs from the body's "
                                 "output shape; see block_at_position<N, ...> below.");
    static constexpr bool ok = identity_ok && projection_ok;
///@}
};

namespace detail {

namespace mp = boost::mp11;

/// Fold state of the binder: nodes and node paths so far, the current main-path shape, whether every entry bound
/// so far passed its checks (binding stops at the first failure so that only one diagnostic is printed), and the
/// index of the next entry of the level.
template <class Nodes, class Paths, class Main, bool Ok, std::size_t Index>
struct bind_state {
    using nodes = Nodes;
    using paths = Paths;
    using main = Main;
    static constexpr bool ok = Ok;
    static constexpr std::size_t index = Index;
};

/// One level of a network (top level, a block's body, a block's shortcut): value type T, path prefix, kind and
/// entry count of the level (for names), C elements carried behind the tensor the level works on, and for a
/// shortcut level F elements (the body output) in front of it.
template <class T, class Prefix, path_kind Kind, std::size_t Count, std::size_t C, std::size_t F = 0>
struct level {
    using value_type = T;
    using prefix = Prefix;
    static constexpr path_kind kind = Kind;
    static constexpr std::size_t count = Count;
    static constexpr std::size_t carry = C;
    static constexpr std::size_t front = F;
};

template <class S>
struct identity_type {
    using type = S;
};
template <class L>
struct output_shape_of {
    using type = typename L::output_shape;
};

template <class Lv, class L>
using node_for =
    std::conditional_t<Lv::kind == path_kind::shortcut, on_shortcut<L, Lv::front, Lv::carry>,
                       std::conditional_t<Lv::carry == 0, L, carried<L, Lv::carry>>>;

template <class Lv>
struct binder;

/// A plain layer spec: bind it, check it, wrap it for the level (carried / on_shortcut).
template <class Lv, class State, class Spec>
struct bind_layer {
    using T = typename Lv::value_type;
    using path = mp::mp_push_back<typename Lv::prefix, path_part<Lv::kind, State::index, Lv::count>>;
    using check = layer_at_position<State::index, Spec, T, typename State::main, path>;
    using bound = typename check::type;
    using next_main = typename std::conditional_t<check::ok, output_shape_of<bound>,
                                                  identity_type<typename State::main>>::type;
    using type = std::conditional_t<
        check::ok,
        bind_state<mp::mp_push_back<typename State::nodes, node_for<Lv, bound>>,
                   mp::mp_push_back<typename State::paths, path>, next_main, true, State::index + 1>,
        bind_state<typename State::nodes, typename State::paths, typename State::main, false, State::index + 1>>;
};

template <class Block>
struct shortcut_of {
    using type = mp::mp_list<>;
};
template <class Block>
    requires requires { typename Block::shortcut_layers; }
struct shortcut_of<Block> {
    using type = typename Block::shortcut_layers;
};

/// A block spec: fork, the body (carrying the skip tensor), the shortcut's layers, add.
template <class Lv, class State, class Block>
struct bind_block {
    static_assert(Lv::kind != path_kind::shortcut,
                  "pipeprop::shortcut: a projection shortcut holds plain layers only, not blocks.");
    using T = typename Lv::value_type;
    using In = typename State::main;
    static constexpr std::size_t c = Lv::carry;
    using prefix = mp::mp_push_back<typename Lv::prefix, path_part<Lv::kind, State::index, Lv::count>>;
    using body_list = typename Block::body;
    using body_level = level<T, prefix, path_kind::body, mp::mp_size<body_list>::value, In::size + c>;
    using body = mp::mp_fold_q<body_list, bind_state<mp::mp_list<>, mp::mp_list<>, In, true, 0>, binder<body_level>>;
    using body_out = typename body::main;
    using shortcut_list = typename shortcut_of<Block>::type;
    using shortcut_level =
        level<T, prefix, path_kind::shortcut, mp::mp_size<shortcut_list>::value, c, body_out::size>;
    using projected = typename std::conditional_t<
        body::ok, mp::mp_defer<mp::mp_fold_q, shortcut_list, bind_state<mp::mp_list<>, mp::mp_list<>, In, true, 0>,
                               binder<shortcut_level>>,
        identity_type<bind_state<mp::mp_list<>, mp::mp_list<>, In, false, 0>>>::type;
    struct checks_skipped {
        static constexpr bool ok = true;
    };
    // Shapes are compared only when body and shortcut bound (else their diagnostic is the one to read).
    using check = std::conditional_t<body::ok && projected::ok,
                                     block_at_position<State::index, Block, T, In, body_out, typename projected::main,
                                                       prefix>,
                                     checks_skipped>;
    static constexpr bool ok = body::ok && projected::ok && check::ok;
    using nodes = mp::mp_append<typename State::nodes, mp::mp_list<block_fork<T, In, c>>, typename body::nodes,
                                typename projected::nodes, mp::mp_list<block_add<T, body_out, c>>>;
    using paths = mp::mp_append<typename State::paths, mp::mp_list<mp::mp_push_back<prefix, path_part<path_kind::fork>>>,
                                typename body::paths, typename projected::paths,
                                mp::mp_list<mp::mp_push_back<prefix, path_part<path_kind::add>>>>;
    using type = std::conditional_t<ok, bind_state<nodes, paths, body_out, true, State::index + 1>,
                                    bind_state<typename State::nodes, typename State::paths, In, false,
                                               State::index + 1>>;
};

/// A sequence spec: its entries at a sub-level of the path, on the same tensor and carry.
template <class Lv, class State, class Seq>
struct bind_sequence {
    using T = typename Lv::value_type;
    using prefix = mp::mp_push_back<typename Lv::prefix, path_part<Lv::kind, State::index, Lv::count>>;
    using body_level = level<T, prefix, path_kind::body, mp::mp_size<typename Seq::body>::value, Lv::carry, Lv::front>;
    using body = mp::mp_fold_q<typename Seq::body, bind_state<mp::mp_list<>, mp::mp_list<>, typename State::main, true, 0>,
                               binder<body_level>>;
    using type = std::conditional_t<
        body::ok,
        bind_state<mp::mp_append<typename State::nodes, typename body::nodes>,
                   mp::mp_append<typename State::paths, typename body::paths>, typename body::main, true,
                   State::index + 1>,
        bind_state<typename State::nodes, typename State::paths, typename State::main, false, State::index + 1>>;
};

template <class Lv, class State, class Spec>
struct bind_entry {
    using type = typename std::conditional_t<
        !State::ok, identity_type<State>,
        std::conditional_t<block_spec<Spec>, bind_block<Lv, State, Spec>,
                           std::conditional_t<sequence_spec<Spec>, bind_sequence<Lv, State, Spec>,
                                              bind_layer<Lv, State, Spec>>>>::type;
};

/// Quoted fold step of one level (boost::mp11::mp_fold_q).
template <class Lv>
struct binder {
    template <class State, class Spec>
    using fn = typename bind_entry<Lv, State, Spec>::type;
};

/// Number of nodes a spec flattens to (independent of the value type).
template <class Spec>
struct node_count : mp::mp_size_t<1> {};
template <class... B>
struct node_count<residual<B...>> : mp::mp_size_t<2 + (node_count<B>::value + ...)> {};
template <class... S, class... B>
struct node_count<residual_projection<shortcut<S...>, B...>>
    : mp::mp_size_t<2 + (node_count<B>::value + ...) + sizeof...(S)> {};

template <class... B>
struct node_count<sequence<B...>> : mp::mp_size_t<(node_count<B>::value + ...)> {};

template <class T, class In, class... Specs>
using bind_network = mp::mp_fold_q<mp::mp_list<Specs...>, bind_state<mp::mp_list<>, mp::mp_list<>, In, true, 0>,
                                   binder<level<T, mp::mp_list<>, path_kind::layer, sizeof...(Specs), 0>>>;

}  // namespace detail

/// A network: per-sample input shape InputShape and a list of layer specs, concrete layers or blocks
/// (graph/blocks.hpp). Blocks are flattened into nodes, so every runner sees one flat list of layers:
/// `layers<T>` is the list of bound node types (boost::mp11::mp_list), `paths<T>` their hierarchical paths
/// (node_path.hpp), `output_shape<T>` the per-sample output, `layer_count` the number of nodes.
/// Static-asserts: at least one layer; every position satisfies the layer concept (see layer_at_position) and
/// every block's shapes agree (block_at_position).
template <class InputShape, class... Specs>
struct network {
    static_assert(shape_type<InputShape>, "pipeprop::network: the first template argument must be the per-sample "
                                          "input shape, a pipeprop::shape<...>.");
    static_assert(sizeof...(Specs) > 0, "pipeprop::network: a network needs at least one layer.");

    using input_shape = InputShape;  ///< The per-sample input shape (a pipeprop::shape).
    /// The specs as given (layer specs, concrete layers, blocks), a boost::mp11::mp_list.
    using specs = boost::mp11::mp_list<Specs...>;
    /// Number of nodes (layers after flattening the blocks).
    static constexpr std::size_t layer_count = (detail::node_count<Specs>::value + ...);

    template <class T>
    /// The flat list of node types bound to value type T (boost::mp11::mp_list): layers, block forks / adds, carried
    /// and shortcut nodes.
    using layers = typename detail::bind_network<T, InputShape, Specs...>::nodes;
    template <class T>
    /// The hierarchical path of every node (node_path.hpp; names in checkpoints and reports).
    using paths = typename detail::bind_network<T, InputShape, Specs...>::paths;

    template <class T>
    /// The per-sample output shape: the last node's output_shape.
    using output_shape = typename boost::mp11::mp_back<layers<T>>::output_shape;
};

template <class N>
concept network_type = requires {
    typename N::input_shape;
    typename N::specs;
    { N::layer_count } -> std::convertible_to<std::size_t>;
};

}  // namespace pipeprop
