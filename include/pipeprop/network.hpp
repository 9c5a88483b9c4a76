// pipeprop/network.hpp: a network is a flat compile-time list of layer specs plus the per-sample input shape.
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
template <std::size_t Position, class Spec, class T, class In>
struct layer_at_position {
    using type = typename detail::bound_type<Spec, T, In>::type;

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
                                  layer_has_backward_weight<type>;
    static_assert(p2_ok, "pipeprop: this layer has parameters but no backward-p2 member `void backward_weight("
                         "std::span<T> dw, const T* x, const T* y, const T* dy, std::size_t b, const stash_type&, "
                         "workspace_type&) const`.");
    static constexpr bool init_ok = !(shapes_ok && count_ok) || type::parameter_count == 0 || layer_has_init<type>;
    static_assert(init_ok, "pipeprop: this layer has parameters but no member `void init_parameters(std::span<T> w, "
                           "std::uint64_t seed) const`.");
    static constexpr bool ok =
        shapes_ok && value_ok && input_ok && count_ok && state_ok && forward_ok && p1_ok && p2_ok && init_ok;
};

namespace detail {

template <class T, class In, std::size_t Position, class... Specs>
struct bind_all {
    using type = boost::mp11::mp_list<>;
};

template <class T, class In, std::size_t Position, class Spec, class... Rest>
struct bind_all<T, In, Position, Spec, Rest...> {
    using check = layer_at_position<Position, Spec, T, In>;
    using head = typename check::type;
    // Stop binding after the first failure so that only one diagnostic is printed.
    using next_input = std::conditional_t<check::ok, typename head::output_shape, In>;
    using tail = std::conditional_t<check::ok, typename bind_all<T, next_input, Position + 1, Rest...>::type,
                                    boost::mp11::mp_list<>>;
    using type = boost::mp11::mp_push_front<tail, head>;
};

}  // namespace detail

/// A network: per-sample input shape InputShape and a flat list of layer specs (or concrete layers).
/// `layers<T>` is the list of bound layer types (boost::mp11::mp_list), `output_shape<T>` the per-sample output.
/// Static-asserts: at least one layer; every position satisfies the layer concept (see layer_at_position).
template <class InputShape, class... Specs>
struct network {
    static_assert(shape_type<InputShape>, "pipeprop::network: the first template argument must be the per-sample "
                                          "input shape, a pipeprop::shape<...>.");
    static_assert(sizeof...(Specs) > 0, "pipeprop::network: a network needs at least one layer.");

    using input_shape = InputShape;
    using specs = boost::mp11::mp_list<Specs...>;
    static constexpr std::size_t layer_count = sizeof...(Specs);

    template <class T>
    using layers = typename detail::bind_all<T, InputShape, 0, Specs...>::type;

    template <class T>
    using output_shape = typename boost::mp11::mp_back<layers<T>>::output_shape;
};

template <class N>
concept network_type = requires {
    typename N::input_shape;
    typename N::specs;
    { N::layer_count } -> std::convertible_to<std::size_t>;
};

}  // namespace pipeprop
