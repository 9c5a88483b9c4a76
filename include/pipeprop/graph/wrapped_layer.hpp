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
    using layer_type = L;
    using value_type = typename L::value_type;
    static constexpr std::size_t parameter_count = L::parameter_count;
    static constexpr std::size_t state_count = state_count_v<L>;
    using stash_type = stash_t<L>;
    using workspace_type = workspace_t<L>;

    L layer{};

    [[nodiscard]] stash_type make_stash(std::size_t max_b) const { return pipeprop::make_stash(layer, max_b); }
    [[nodiscard]] workspace_type make_workspace(std::size_t max_b) const {
        return pipeprop::make_workspace(layer, max_b);
    }
    [[nodiscard]] std::size_t stash_bytes(const stash_type& st) const { return pipeprop::stash_bytes(layer, st); }

    static constexpr auto parameter_tensors()
        requires requires { L::parameter_tensors(); }
    {
        return L::parameter_tensors();
    }
    static constexpr auto state_tensors()
        requires requires { L::state_tensors(); }
    {
        return L::state_tensors();
    }
    void init_parameters(std::span<value_type> w, std::uint64_t seed) const
        requires(parameter_count > 0)
    {
        layer.init_parameters(w, seed);
    }
    void init_state(std::span<value_type> s) const
        requires(state_count > 0)
    {
        layer.init_state(s);
    }
};

}  // namespace pipeprop
