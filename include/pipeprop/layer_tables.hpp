// pipeprop/layer_tables.hpp: what a network's node positions are, as constant expressions.
//
// layer_tables<Net, T> (the base of layer_stack<Net, T>) holds the node types of network Net bound to value type T
// and, per position, arrays of plain values derived from one layer_facts record per node TYPE: the parameter and
// running-state offsets, the per-sample activation sizes, the node names, where a stage boundary may go, and which
// nodes have parameters or normalize. Runners index these arrays at run time; nothing here generates code per
// position.
#pragma once

#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>

#include <array>
#include <cstddef>
#include <string_view>
#include <tuple>

#include "pipeprop/layer_buffers.hpp"
#include "pipeprop/layer_entry_points.hpp"
#include "pipeprop/network.hpp"

namespace pipeprop {

/// The node types and per-position tables of network Net with value type T (see the file comment).
template <network_type Net, class T>
struct layer_tables {
    using network_type = Net;  ///< The network type Net.
    using value_type = T;  ///< The value type T of every node.
    using layer_list = typename Net::template layers<T>;  ///< The node types, Net::layers<T> (a boost::mp11::mp_list).
    static constexpr std::size_t layer_count = boost::mp11::mp_size<layer_list>::value;  ///< Number of nodes.
    using input_shape = typename Net::input_shape;  ///< Per-sample input shape of the network.
    /// Per-sample output shape of the network (the last node's).
    using output_shape = typename boost::mp11::mp_back<layer_list>::output_shape;

    template <std::size_t I>
    using layer_type = boost::mp11::mp_at_c<layer_list, I>;  ///< The type of node I.

    ///@{
    /// facts[i], entry_points[i]: the compile-time facts and the entry points of node i's type (layer_entry_points.hpp;
    /// one record per position, each made once per node type).
    static constexpr std::array<layer_facts, layer_count> facts =
        detail::facts_of(boost::mp11::mp_rename<layer_list, boost::mp11::mp_list>{});
    static constexpr std::array<layer_entry_points<T>, layer_count> entry_points =
        detail::entry_points_of<T>(boost::mp11::mp_rename<layer_list, boost::mp11::mp_list>{});
    ///@}

private:
    template <class F>
    static constexpr auto per_position(F f) {
        std::array<decltype(f(std::size_t{0})), layer_count> a{};
        for (std::size_t i = 0; i < layer_count; ++i) a[i] = f(i);
        return a;
    }
    template <class F>
    static constexpr std::array<std::size_t, layer_count + 1> prefix_sum(F f) {
        std::array<std::size_t, layer_count + 1> o{};
        for (std::size_t i = 0; i < layer_count; ++i) o[i + 1] = o[i] + f(i);
        return o;
    }

public:
    /// parameter_offset[i]: first element of layer i in the network's parameter block; [layer_count] = total.
    static constexpr std::array<std::size_t, layer_count + 1> parameter_offset =
        prefix_sum([](std::size_t i) { return facts[i].parameter_count; });
    /// Elements of the network's parameter block (the sum over its nodes).
    static constexpr std::size_t parameter_count = parameter_offset[layer_count];

    /// activation_size[k]: per-sample elements of the input of layer k; [layer_count] = network output size.
    static constexpr std::array<std::size_t, layer_count + 1> activation_size = [] {
        std::array<std::size_t, layer_count + 1> a{};
        for (std::size_t i = 0; i < layer_count; ++i) a[i] = facts[i].input_size;
        a[layer_count] = facts[layer_count - 1].output_size;
        return a;
    }();

    /// node_names[i]: hierarchical name of node i, e.g. "layer_03.body_01" (graph/node_path.hpp).
    static constexpr std::array<std::string_view, layer_count> node_names =
        detail::names_of(boost::mp11::mp_rename<typename Net::template paths<T>, boost::mp11::mp_list>{});

    /// cut_allowed_before[i]: a stage boundary may be put in front of node i (false for the layers of a projection
    /// shortcut and the add after them, which share the add's stage: docs/pb-semantics.md §6); [0] is true.
    static constexpr std::array<bool, layer_count> cut_allowed_before = [] {
        std::array<bool, layer_count> c{};
        for (std::size_t i = 0; i < layer_count; ++i) {
            c[i] = facts[i].cut_allowed_before;
            // The add of a projection block follows its shortcut's last layer: it stays in that layer's stage.
            if (i > 0 && facts[i - 1].declares_cut_allowed) c[i] = c[i] && facts[i - 1].cut_allowed_before;
        }
        c[0] = true;
        return c;
    }();

    /// state_offset[i]: first element of layer i in the network's running-state block (stateful layers,
    /// layer_concept.hpp); [layer_count] = total.
    static constexpr std::array<std::size_t, layer_count + 1> state_offset =
        prefix_sum([](std::size_t i) { return facts[i].state_count; });
    /// Elements of the network's running-state block (0 when no layer has state).
    static constexpr std::size_t state_count = state_offset[layer_count];

    /// Elements of the running-state block of range r.
    static constexpr std::size_t state_count_of(layer_range r) noexcept {
        return state_offset[r.end] - state_offset[r.begin];
    }

    /// True when some layer has the weighted backward-p2 form (layer_concept.hpp).
    static constexpr bool has_weighted_backward_weight = [] {
        for (const layer_facts& f : facts)
            if (f.weighted_backward_weight) return true;
        return false;
    }();

    /// has_parameters[i]: layer i has a non-empty parameter block.
    static constexpr std::array<bool, layer_count> has_parameters =
        per_position([](std::size_t i) { return facts[i].parameter_count > 0; });

    /// normalizes[i]: layer i is a normalization layer (declares `normalization = true`, layer_concept.hpp).
    static constexpr std::array<bool, layer_count> normalizes =
        per_position([](std::size_t i) { return facts[i].normalization; });

    /// The whole network as one range.
    static constexpr layer_range all() noexcept { return {0, layer_count}; }

    /// Elements of the parameter block of range r.
    static constexpr std::size_t parameter_count_of(layer_range r) noexcept {
        return parameter_offset[r.end] - parameter_offset[r.begin];
    }
};

}  // namespace pipeprop
