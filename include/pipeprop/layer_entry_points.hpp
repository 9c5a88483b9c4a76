// pipeprop/layer_entry_points.hpp: the passes of one layer type behind plain function pointers.
//
// A network of N nodes has far fewer distinct node types (ResNet-56: 225 nodes of 34 types). layer_stack keeps one
// layer_entry_points record per node position, but every record points at functions instantiated once per layer
// TYPE: the layer object, its stash and its workspace travel as untyped pointers and each entry point casts them
// back to the one type it was instantiated for. Passes then walk positions at run time, and the code a network
// generates grows with its number of distinct layer types, not with its depth.
//
// The entry points call exactly the layer members a hand-written call would (the stateful or the stateless forms,
// the weighted or the plain backward-p2), with the same arguments: results are bit-identical to calling the layer
// directly.
#pragma once

#include <boost/mp11/list.hpp>

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "pipeprop/layer_concept.hpp"
#include "pipeprop/graph/node_path.hpp"
#include "pipeprop/optim/momentum_update.hpp"

namespace pipeprop {

namespace detail {

/// An object of a type known only to its creator: a stash or a workspace of one layer position, owned here and
/// destroyed through the creator's deleter.
using owned_object = std::unique_ptr<void, void (*)(void*)>;

/// The layer type behind a network node (graph nodes wrap a layer as `layer_type`; plain layers are their own).
template <class L>
struct node_layer {
    using type = L;
};
template <class L>
    requires requires { typename L::layer_type; }
struct node_layer<L> {
    using type = typename L::layer_type;
};

/// A graph node that passes carry_size elements per sample through unchanged behind its main part (carried<L, C>,
/// graph/carried.hpp); its forward_main / backward_input_main leave that part alone.
template <class L>
concept carry_through_node = requires {
    { L::carry_size } -> std::convertible_to<std::size_t>;
    typename L::layer_type;
};

}  // namespace detail

/// Entry points of one layer type L with value type T. Every pointer argument named `layer` is a `const L*`,
/// `stash` a `stash_t<L>*`, `workspace` a `workspace_t<L>*`. Tensors as in layer_concept.hpp: x, y, dy, dx are
/// [b, per-sample size]; w, dw, v are the layer's parameter block [L::parameter_count]; s its running-state block
/// [state_count_v<L>] (ignored for a stateless layer).
template <class T>
struct layer_entry_points {
    /// The layer's make_stash (pipeprop::make_stash), type-erased.
    detail::owned_object (*make_stash)(const void* layer, std::size_t max_b);
    /// The layer's stash_bytes (pipeprop::stash_bytes).
    std::size_t (*stash_bytes)(const void* layer, const void* stash);
    /// The layer's make_workspace (pipeprop::make_workspace), type-erased.
    detail::owned_object (*make_workspace)(const void* layer, std::size_t max_b);
    /// The layer's workspace_bytes (pipeprop::workspace_bytes).
    std::size_t (*workspace_bytes)(const void* layer, const void* workspace);
    ///@{
    /// Bytes of a stash / workspace for max_b samples without making it (pipeprop::stash_bytes_for,
    /// pipeprop::workspace_bytes_for).
    std::size_t (*stash_bytes_for)(const void* layer, std::size_t max_b);
    std::size_t (*workspace_bytes_for)(const void* layer, std::size_t max_b);
    ///@}
    /// Training forward: the stateless forward, or the stateful one with s.
    void (*forward)(const void* layer, std::span<const T> w, const T* x, T* y, std::size_t b, void* stash,
                    void* workspace, std::span<T> s);
    /// Evaluation forward: infer with the state for a stateful layer, the training forward (with a scratch stash)
    /// for a stateless one.
    void (*infer)(const void* layer, std::span<const T> w, const T* x, T* y, std::size_t b, void* stash,
                  void* workspace, std::span<const T> s);
    /// Backward-p1 (2BP): the stateless backward_input, or the stateful one with s.
    void (*backward_input)(const void* layer, std::span<const T> w, const T* x, const T* y, const T* dy, T* dx,
                           std::size_t b, void* stash, void* workspace, std::span<T> s);
    ///@{
    /// forward / backward_input without the copy of the carried part (a carried<L, C> node: the part of y / dx after
    /// the main part is not written); nullptr for other nodes (layer_facts::carry_size 0).
    void (*forward_main)(const void* layer, std::span<const T> w, const T* x, T* y, std::size_t b, void* stash,
                         void* workspace, std::span<T> s);
    void (*backward_input_main)(const void* layer, std::span<const T> w, const T* x, const T* y, const T* dy,
                                T* dx, std::size_t b, void* stash, void* workspace, std::span<T> s);
    ///@}
    /// Backward-p2 (dw += ...); nullptr for a parameter-free layer.
    void (*backward_weight)(const void* layer, std::span<const T> w, std::span<T> dw, const T* x, const T* y,
                            const T* dy, std::size_t b, const void* stash, void* workspace);
    /// Backward-p2 of one sample fused into the momentum update; nullptr unless the layer has it
    /// (layer_has_fused_momentum_update).
    void (*backward_weight_momentum_update)(const void* layer, std::span<T> w, std::span<T> v, const T* x,
                                            const T* dy, const optim::update_coefficients<T>& c);
    /// nullptr for a parameter-free layer.
    void (*init_parameters)(const void* layer, std::span<T> w, std::uint64_t seed);
    /// nullptr for a stateless layer.
    void (*init_state)(const void* layer, std::span<T> s);
};

namespace detail {

template <class L, class T>
struct layer_entry_impl {
    using stash = stash_t<L>;
    using workspace = workspace_t<L>;
    static constexpr bool stateful = state_count_v<L> > 0;

    static const L& self(const void* p) noexcept { return *static_cast<const L*>(p); }
    static stash& st(void* p) noexcept { return *static_cast<stash*>(p); }
    static workspace& ws(void* p) noexcept { return *static_cast<workspace*>(p); }

    static owned_object make_stash(const void* l, std::size_t max_b) {
        return owned_object(new stash(pipeprop::make_stash(self(l), max_b)),
                            [](void* p) { delete static_cast<stash*>(p); });
    }
    static std::size_t stash_bytes(const void* l, const void* s) {
        return pipeprop::stash_bytes(self(l), *static_cast<const stash*>(s));
    }
    static owned_object make_workspace(const void* l, std::size_t max_b) {
        return owned_object(new workspace(pipeprop::make_workspace(self(l), max_b)),
                            [](void* p) { delete static_cast<workspace*>(p); });
    }
    static std::size_t workspace_bytes(const void* l, const void* w_s) {
        return pipeprop::workspace_bytes(self(l), *static_cast<const workspace*>(w_s));
    }
    static std::size_t stash_bytes_for(const void* l, std::size_t max_b) {
        return pipeprop::stash_bytes_for(self(l), max_b);
    }
    static std::size_t workspace_bytes_for(const void* l, std::size_t max_b) {
        return pipeprop::workspace_bytes_for(self(l), max_b);
    }
    static void forward(const void* l, std::span<const T> w, const T* x, T* y, std::size_t b, void* s, void* w_s,
                        std::span<T> state) {
        if constexpr (stateful)
            self(l).forward(w, x, y, b, st(s), ws(w_s), state);
        else
            self(l).forward(w, x, y, b, st(s), ws(w_s));
    }
    static void infer(const void* l, std::span<const T> w, const T* x, T* y, std::size_t b, void* s, void* w_s,
                      std::span<const T> state) {
        if constexpr (stateful)
            self(l).infer(w, x, y, b, ws(w_s), state);
        else
            self(l).forward(w, x, y, b, st(s), ws(w_s));
    }
    static void backward_input(const void* l, std::span<const T> w, const T* x, const T* y, const T* dy, T* dx,
                               std::size_t b, void* s, void* w_s, std::span<T> state) {
        if constexpr (stateful)
            self(l).backward_input(w, x, y, dy, dx, b, st(s), ws(w_s), state);
        else
            self(l).backward_input(w, x, y, dy, dx, b, st(s), ws(w_s));
    }
    static void forward_main(const void* l, std::span<const T> w, const T* x, T* y, std::size_t b, void* s,
                             void* w_s, std::span<T> state) {
        if constexpr (stateful)
            self(l).forward_main(w, x, y, b, st(s), ws(w_s), state);
        else
            self(l).forward_main(w, x, y, b, st(s), ws(w_s));
    }
    static void backward_input_main(const void* l, std::span<const T> w, const T* x, const T* y, const T* dy, T* dx,
                                    std::size_t b, void* s, void* w_s, std::span<T> state) {
        if constexpr (stateful)
            self(l).backward_input_main(w, x, y, dy, dx, b, st(s), ws(w_s), state);
        else
            self(l).backward_input_main(w, x, y, dy, dx, b, st(s), ws(w_s));
    }
    static void backward_weight(const void* l, std::span<const T> w, std::span<T> dw, const T* x, const T* y,
                                const T* dy, std::size_t b, const void* s, void* w_s) {
        call_backward_weight(self(l), w, dw, x, y, dy, b, *static_cast<const stash*>(s), ws(w_s));
    }
    static void backward_weight_momentum_update(const void* l, std::span<T> w, std::span<T> v, const T* x,
                                                const T* dy, const optim::update_coefficients<T>& c) {
        self(l).backward_weight_momentum_update(w, v, x, dy, c);
    }
    static void init_parameters(const void* l, std::span<T> w, std::uint64_t seed) { self(l).init_parameters(w, seed); }
    static void init_state(const void* l, std::span<T> s) { self(l).init_state(s); }

    static constexpr layer_entry_points<T> value() noexcept {
        layer_entry_points<T> e{};
        e.make_stash = &make_stash;
        e.stash_bytes = &stash_bytes;
        e.make_workspace = &make_workspace;
        e.workspace_bytes = &layer_entry_impl::workspace_bytes;
        e.stash_bytes_for = &layer_entry_impl::stash_bytes_for;
        e.workspace_bytes_for = &layer_entry_impl::workspace_bytes_for;
        e.forward = &forward;
        e.infer = &infer;
        e.backward_input = &backward_input;
        if constexpr (carry_through_node<L>) {
            e.forward_main = &forward_main;
            e.backward_input_main = &backward_input_main;
        }
        if constexpr (L::parameter_count > 0) {
            e.backward_weight = &layer_entry_impl::backward_weight;
            e.init_parameters = &layer_entry_impl::init_parameters;
            if constexpr (layer_has_fused_momentum_update<L>)
                e.backward_weight_momentum_update = &layer_entry_impl::backward_weight_momentum_update;
        }
        if constexpr (stateful) e.init_state = &layer_entry_impl::init_state;
        return e;
    }
};

}  // namespace detail

/// The entry points of layer type L with value type T (instantiated once per type).
template <class L, class T>
inline constexpr layer_entry_points<T> layer_entry_points_of = detail::layer_entry_impl<L, T>::value();

/// What layer_stack needs to know of one node type at compile time, as plain values (one record per type).
struct layer_facts {
    std::size_t input_size = 0;       ///< per-sample elements of the input
    std::size_t output_size = 0;      ///< per-sample elements of the output
    std::size_t parameter_count = 0;  ///< elements of the parameter block
    std::size_t state_count = 0;      ///< elements of the running-state block (0: stateless)
    bool declares_cut_allowed = false;  ///< the node declares cut_allowed_before
    bool cut_allowed_before = true;     ///< its value (true when not declared)
    bool weighted_backward_weight = false;  ///< backward-p2 reads the weights (layer_concept.hpp)
    bool normalization = false;             ///< a normalization layer (layer_concept.hpp)
    bool fuses_momentum_update = false;     ///< has parameters and backward_weight_momentum_update
    /// Elements per sample passed through unchanged behind the main part (a carried<L, C> node: C; else 0).
    std::size_t carry_size = 0;
};

/// The layer_facts of node type L.
template <class L>
inline constexpr layer_facts layer_facts_of = [] {
    using inner = typename detail::node_layer<L>::type;
    layer_facts f;
    f.input_size = L::input_shape::size;
    f.output_size = L::output_shape::size;
    f.parameter_count = L::parameter_count;
    f.state_count = state_count_v<L>;
    if constexpr (requires { L::cut_allowed_before; }) {
        f.declares_cut_allowed = true;
        f.cut_allowed_before = L::cut_allowed_before;
    }
    if constexpr (L::parameter_count > 0) f.weighted_backward_weight = layer_has_weighted_backward_weight<inner>;
    f.normalization = is_normalization_layer<inner>;
    f.fuses_momentum_update = L::parameter_count > 0 && layer_has_fused_momentum_update<L>;
    if constexpr (detail::carry_through_node<L>) f.carry_size = L::carry_size;
    return f;
}();

namespace detail {
// The per-position tables of a list of node types (one record per position, made once per type).
template <class T, class... Ls>
constexpr std::array<layer_entry_points<T>, sizeof...(Ls)> entry_points_of(boost::mp11::mp_list<Ls...>) {
    return {layer_entry_points_of<Ls, T>...};
}
template <class... Ls>
constexpr std::array<layer_facts, sizeof...(Ls)> facts_of(boost::mp11::mp_list<Ls...>) {
    return {layer_facts_of<Ls>...};
}
template <class... Ps>
constexpr std::array<std::string_view, sizeof...(Ps)> names_of(boost::mp11::mp_list<Ps...>) {
    return {node_name_v<Ps>...};
}
}  // namespace detail

}  // namespace pipeprop
