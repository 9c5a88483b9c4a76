// pipeprop/graph/wrapped_layer.hpp: what a node that runs one layer on part of its buffer forwards to that layer.
//
// Base of carried<L, C> and on_shortcut<L, F, C>: the wrapped layer L's value type, parameter and running-state
// counts, stash and workspace types and their factories, tensor names and initialization are the node's own. The
// derived node adds its shapes and the passes, which run L on its part of the buffer and move the rest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "pipeprop/layer_concept.hpp"

namespace pipeprop {

/// Everything of layer L that a node wrapping it exposes unchanged (see the file comment).
template <class L>
struct wrapped_layer {
    using layer_type = L;  ///< The wrapped layer's type L.
    using value_type = typename L::value_type;  ///< L's value type (the node's too).
    /// L's parameter count: the node's parameters are L's.
    static constexpr std::size_t parameter_count = L::parameter_count;
    static constexpr std::size_t state_count = state_count_v<L>;  ///< L's running-state count (0 for a stateless L).
    using stash_type = stash_t<L>;  ///< L's stash type (pipeprop::stash_t).
    using workspace_type = workspace_t<L>;  ///< L's workspace type (pipeprop::workspace_t).

    L layer{};  ///< The wrapped layer, default-constructed (layers are stateless values).

    /// L's stash for micro-batches of up to max_b samples (pipeprop::make_stash).
    [[nodiscard]] stash_type make_stash(std::size_t max_b) const { return pipeprop::make_stash(layer, max_b); }
    /// L's workspace for micro-batches of up to max_b samples (pipeprop::make_workspace).
    [[nodiscard]] workspace_type make_workspace(std::size_t max_b) const {
        return pipeprop::make_workspace(layer, max_b);
    }
    /// Bytes held by L's stash st (pipeprop::stash_bytes).
    [[nodiscard]] std::size_t stash_bytes(const stash_type& st) const { return pipeprop::stash_bytes(layer, st); }
    /// Bytes held by L's workspace ws (pipeprop::workspace_bytes).
    [[nodiscard]] std::size_t workspace_bytes(const workspace_type& ws) const {
        return pipeprop::workspace_bytes(layer, ws);
    }

    /// L's parameter tensor names and shapes (when L declares them).
    static constexpr auto parameter_tensors()
        requires requires { L::parameter_tensors(); }
    {
        return L::parameter_tensors();
    }
    /// L's state tensor names and shapes (when L declares them).
    static constexpr auto state_tensors()
        requires requires { L::state_tensors(); }
    {
        return L::state_tensors();
    }
    /// Initializes L's parameters w [parameter_count] from seed (L::init_parameters).
    void init_parameters(std::span<value_type> w, std::uint64_t seed) const
        requires(parameter_count > 0)
    {
        layer.init_parameters(w, seed);
    }
    void init_state(std::span<value_type> s) const  ///< Initializes L's running state s [state_count] (L::init_state).
        requires(state_count > 0)
    {
        layer.init_state(s);
    }
};

}  // namespace pipeprop
