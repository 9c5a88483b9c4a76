// pipeprop/runtime_layer_tables.hpp: a network's per-position tables as run-time values.
//
// runtime_layer_tables<T> (the base of runtime_layer_stack<T>, runtime_layer_stack.hpp) holds what
// layer_tables<Net, T> (layer_tables.hpp) computes as constant expressions, as spans over those arrays: node count,
// parameter and running-state offsets, per-sample activation sizes, node names, where a stage boundary may go, and
// each position's facts and entry points. Code that reads a network only through them is compiled once for every
// network.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pipeprop/layer_buffers.hpp"
#include "pipeprop/layer_entry_points.hpp"

namespace pipeprop {

namespace detail {
// Shared by runtime_layer_stack and layer_stack's constant expressions.
constexpr std::size_t inference_stride(std::span<const std::size_t> activation_size, std::size_t max_b) noexcept {
    std::size_t m = 0;
    for (std::size_t a : activation_size) m = std::max(m, a);
    return (m * max_b + 15) / 16 * 16;  // whole 64-byte lines between the buffers
}
constexpr bool fuses_momentum_update_in(std::span<const layer_facts> facts, layer_range r) noexcept {
    for (std::size_t i = r.begin; i < r.end && i < facts.size(); ++i)
        if (facts[i].fuses_momentum_update) return true;
    return false;
}
inline std::vector<std::pair<std::size_t, std::size_t>> unfused_parameter_runs(
    std::span<const layer_facts> facts, std::span<const std::size_t> parameter_offset, layer_range r) {
    std::vector<std::pair<std::size_t, std::size_t>> runs;
    std::size_t start = parameter_offset[r.begin];
    for (std::size_t i = r.begin; i < r.end; ++i) {
        if (!facts[i].fuses_momentum_update) continue;
        if (parameter_offset[i] > start)
            runs.emplace_back(start - parameter_offset[r.begin], parameter_offset[i] - start);
        start = parameter_offset[i + 1];
    }
    if (parameter_offset[r.end] > start)
        runs.emplace_back(start - parameter_offset[r.begin], parameter_offset[r.end] - start);
    return runs;
}
}  // namespace detail

/// A network's tables with value type T (see the file comment). Made only as a base of layer_stack<Net, T>.
template <class T>
class runtime_layer_tables {
public:
    ///@{
    /// The network's tables (layer_tables.hpp gives their meaning): node count, parameter and running-state
    /// elements, whether some layer has the weighted backward-p2 form; per position the parameter and state
    /// offsets ([layer_count + 1]), the per-sample activation sizes ([layer_count + 1]), the node names, where a
    /// stage boundary may go, which nodes have parameters and which normalize ([layer_count]).
    const std::size_t layer_count;
    const std::size_t parameter_count;
    const std::size_t state_count;
    const bool has_weighted_backward_weight;
    const std::span<const std::size_t> parameter_offset;
    const std::span<const std::size_t> state_offset;
    const std::span<const std::size_t> activation_size;
    const std::span<const std::string_view> node_names;
    const std::span<const bool> cut_allowed_before;
    const std::span<const bool> has_parameters;
    const std::span<const bool> normalizes;
    ///@}

    /// The whole network as one range.
    [[nodiscard]] layer_range all() const noexcept { return {0, layer_count}; }
    /// Elements of the parameter block of range r.
    [[nodiscard]] std::size_t parameter_count_of(layer_range r) const noexcept {
        return parameter_offset[r.end] - parameter_offset[r.begin];
    }
    /// Elements of the running-state block of range r.
    [[nodiscard]] std::size_t state_count_of(layer_range r) const noexcept {
        return state_offset[r.end] - state_offset[r.begin];
    }

    /// Elements of the two inference buffers make_inference_activations needs for micro-batches of up to max_b
    /// samples: 2 x inference_stride(max_b), where the stride holds the network's largest per-sample activation.
    [[nodiscard]] std::size_t inference_stride(std::size_t max_b) const noexcept {
        return detail::inference_stride(activation_size, max_b);
    }
    /// True when some layer of range r updates its weights in backward_momentum_update.
    [[nodiscard]] bool fuses_momentum_update_in(layer_range r) const noexcept {
        return detail::fuses_momentum_update_in(facts_, r);
    }
    /// The parts of range r's parameter block [parameter_count_of(r)] that backward_momentum_update does NOT update,
    /// as {offset in the block, count} in order (the whole block, or nothing for a parameter-free range, when no
    /// layer of r fuses). Setup time (allocates).
    [[nodiscard]] std::vector<std::pair<std::size_t, std::size_t>> unfused_parameter_runs(layer_range r) const {
        return detail::unfused_parameter_runs(facts_, parameter_offset, r);
    }

    /// The bytes() of activations of range r for max_b samples, computed without making them (memory_estimate.hpp):
    /// the layers' stashes (pipeprop::stash_bytes_for) plus, unless `inference` (make_inference_activations: a(k) in
    /// the caller's buffers), a(k) for k in [begin, end] but the `external` boundaries, and g(k) for every k when
    /// own_gradients (make_activations; false: make_activations_sharing_gradients). Throws as make_activations.
    [[nodiscard]] std::size_t activation_bytes(layer_range r, std::size_t max_b, bool own_gradients,
                                               bool inference = false, external_boundaries external = {}) const {
        check_range(r, "activation_bytes");
        std::size_t values = 0, stashes = 0;
        for (std::size_t k = r.begin; k <= r.end; ++k) values += activation_size[k] * max_b;
        for (std::size_t k = r.begin; k < r.end; ++k)
            stashes += entry_points_[k].stash_bytes_for(address_(k), max_b);
        const std::size_t own = values - (external.input ? activation_size[r.begin] * max_b : 0) -
                                (external.output ? activation_size[r.end] * max_b : 0);
        return inference ? stashes : (own + (own_gradients ? values : 0)) * sizeof(T) + stashes;
    }
    /// The bytes() of make_workspaces(r, max_b), computed without making them (pipeprop::workspace_bytes_for).
    [[nodiscard]] std::size_t workspace_bytes(layer_range r, std::size_t max_b) const {
        check_range(r, "workspace_bytes");
        std::size_t n = 0;
        for (std::size_t k = r.begin; k < r.end; ++k)
            n += entry_points_[k].workspace_bytes_for(address_(k), max_b);
        return n;
    }

protected:
    /// The tables of a network type (layer_tables<Net, T>'s arrays) and its per-position facts and entry points.
    struct tables {
        ///@{
        /// As the members of the same names (facts, entry_points: one record per position).
        std::size_t layer_count, parameter_count, state_count;
        bool has_weighted_backward_weight;
        std::span<const std::size_t> parameter_offset, state_offset, activation_size;
        std::span<const std::string_view> node_names;
        std::span<const bool> cut_allowed_before, has_parameters, normalizes;
        std::span<const layer_facts> facts;
        std::span<const layer_entry_points<T>> entry_points;
        ///@}
    };
    ///@{
    /// Made from a network type's tables; copied with the layer_stack that owns it.
    explicit runtime_layer_tables(const tables& t) noexcept
        : layer_count(t.layer_count), parameter_count(t.parameter_count), state_count(t.state_count),
          has_weighted_backward_weight(t.has_weighted_backward_weight), parameter_offset(t.parameter_offset),
          state_offset(t.state_offset), activation_size(t.activation_size), node_names(t.node_names),
          cut_allowed_before(t.cut_allowed_before), has_parameters(t.has_parameters), normalizes(t.normalizes),
          facts_(t.facts), entry_points_(t.entry_points) {}
    runtime_layer_tables(const runtime_layer_tables&) = default;
    ///@}
    ~runtime_layer_tables() = default;  ///< Not deleted through a base pointer (protected).
    /// Points the passes at the layer objects: addresses[i] is node i's (valid while the owner lives).
    void bind_layers(const void* const* addresses) noexcept { addresses_ = addresses; }
    /// Node i's layer object.
    const void* address_(std::size_t i) const noexcept { return addresses_[i]; }
    std::span<const layer_facts> facts_;  ///< facts_[i]: node i's layer_facts
    std::span<const layer_entry_points<T>> entry_points_;  ///< entry_points_[i]: node i's entry points
    /// Throws std::invalid_argument (naming `what`) for an empty range or one past the last node.
    void check_range(layer_range r, const char* what) const {
        if (r.begin >= r.end || r.end > layer_count)
            throw std::invalid_argument(std::string("pipeprop::layer_stack::") + what + ": range [" +
                                        std::to_string(r.begin) + ", " + std::to_string(r.end) +
                                        ") is empty or exceeds the " + std::to_string(layer_count) + " layers");
    }

private:
    const void* const* addresses_ = nullptr;
};

}  // namespace pipeprop
