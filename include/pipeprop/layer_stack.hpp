// pipeprop/layer_stack.hpp: the layers of a network type and the passes over contiguous ranges of them.
//
// This is the one place where layers are called. The sequential trainer runs the whole network as one range; the
// pipeline executors run one range per stage. Parameters of a range are one contiguous block (a slice of the
// network's block, layers in order, each layer's tensors in its parameter_tensors() order).
//
// Code per layer type, positions at run time: every pass is one loop over the positions of its range that calls
// each position's layer through the entry points of its type (layer_entry_points.hpp). The passes live in
// runtime_layer_stack<T> (runtime_layer_stack.hpp), which sees the network only through run-time tables, so their
// code is generated once per value type, not per network; layer_stack<Net, T> owns the layer objects and adds the
// compile-time view of the tables (layer_tables.hpp) and typed access to a position's layer, stash and workspace.
// A network's generated code therefore grows with its number of distinct node types, not with its depth or its
// number of stages.
//
// The buffers a pass runs on (activations, stashes, workspaces): layer_buffers.hpp.
#pragma once

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "pipeprop/layer_buffers.hpp"
#include "pipeprop/layer_concept.hpp"
#include "pipeprop/layer_storage.hpp"
#include "pipeprop/layer_tables.hpp"
#include "pipeprop/network.hpp"
#include "pipeprop/runtime_layer_stack.hpp"

namespace pipeprop {

/// The bound layers of network Net with value type T, and the operations over ranges of them (the passes:
/// runtime_layer_stack<T>; the tables, also as constant expressions: layer_tables<Net, T>). Copyable: a copy holds
/// its own layer objects.
template <network_type Net, class T>
class layer_stack : public layer_tables<Net, T>, public runtime_layer_stack<T> {
private:
    using base = layer_tables<Net, T>;
    using runtime = runtime_layer_stack<T>;
    using base::facts;
    using base::entry_points;

public:
    ///@{
    /// The tables as constant expressions (layer_tables<Net, T>); runtime_layer_stack<T> holds the same values.
    using typename base::layer_list;
    using typename base::input_shape;
    using typename base::output_shape;
    using base::layer_count;
    using base::parameter_offset;
    using base::parameter_count;
    using base::state_offset;
    using base::state_count;
    using base::state_count_of;
    using base::activation_size;
    using base::has_weighted_backward_weight;
    using base::node_names;
    using base::cut_allowed_before;
    using base::has_parameters;
    using base::normalizes;
    using base::all;
    using base::parameter_count_of;
    ///@}
    using typename runtime::value_type;
    /// Per-micro-batch buffers of one range (layer_buffers.hpp). Move-only.
    using typename runtime::activations;
    /// Scratch memory of the layers of one range, owned by whoever runs the range (one per thread of execution).
    using typename runtime::workspaces;
    using runtime::backward_weight;

    layer_stack() : runtime(tables_of()) { this->bind_layers(layers_.addresses()); }
    ///@{
    /// Copies the layer objects; the copy's passes run on its own objects.
    layer_stack(const layer_stack& o) : base(o), runtime(o), layers_(o.layers_) {
        this->bind_layers(layers_.addresses());
    }
    layer_stack& operator=(const layer_stack& o) {
        layers_ = o.layers_;  // the tables are the type's: nothing else differs
        this->bind_layers(layers_.addresses());
        return *this;
    }
    ///@}

    /// The layer object at position I.
    template <std::size_t I>
    [[nodiscard]] const typename base::template layer_type<I>& layer() const noexcept {
        return *static_cast<const typename base::template layer_type<I>*>(layers_.address(I));
    }
    /// The stash of position I in act (I in act's range).
    template <std::size_t I>
    [[nodiscard]] stash_t<typename base::template layer_type<I>>& stash(activations& act) const noexcept {
        return *static_cast<stash_t<typename base::template layer_type<I>>*>(runtime::stash_address(act, I));
    }
    /// The workspace of position I in ws (I in the range ws was made for).
    template <std::size_t I>
    [[nodiscard]] workspace_t<typename base::template layer_type<I>>& workspace(workspaces& ws) const noexcept {
        return *static_cast<workspace_t<typename base::template layer_type<I>>*>(runtime::workspace_address(ws, I));
    }

    /// Elements of the two inference buffers make_inference_activations needs for micro-batches of up to max_b
    /// samples: 2 x inference_stride(max_b), where the stride holds the network's largest per-sample activation.
    static constexpr std::size_t inference_stride(std::size_t max_b) noexcept {
        return detail::inference_stride(activation_size, max_b);
    }
    /// True when layer I updates its weights in backward_momentum_update (layer_has_fused_momentum_update).
    template <std::size_t I>
    static constexpr bool fuses_momentum_update = facts[I].fuses_momentum_update;
    /// True when some layer of range r updates its weights in backward_momentum_update.
    static constexpr bool fuses_momentum_update_in(layer_range r) noexcept {
        return detail::fuses_momentum_update_in(facts, r);
    }
    /// The parts of range r's parameter block that backward_momentum_update does NOT update
    /// (runtime_layer_stack::unfused_parameter_runs). Setup time (allocates).
    static std::vector<std::pair<std::size_t, std::size_t>> unfused_parameter_runs(layer_range r) {
        return detail::unfused_parameter_runs(facts, parameter_offset, r);
    }

    /// Backward-p2 without the weights, for networks none of whose layers has the weighted p2 form (refused at
    /// compile time otherwise).
    template <class Range = dynamic_range>
    void backward_weight(std::span<T> dw, const activations& act, std::size_t b, workspaces& ws,
                         Range range = {}) const {
        static_assert(!has_weighted_backward_weight,
                      "pipeprop::layer_stack::backward_weight: a layer of this network reads its weights in "
                      "backward-p2; call backward_weight(w, dw, act, b, ws).");
        runtime::backward_weight(std::span<const T>{}, dw, act, b, ws, range);
    }

private:
    static typename runtime::tables tables_of() noexcept {
        return {layer_count,
                parameter_count,
                state_count,
                has_weighted_backward_weight,
                parameter_offset,
                state_offset,
                activation_size,
                node_names,
                cut_allowed_before,
                has_parameters,
                normalizes,
                facts,
                entry_points};
    }

    layer_storage<layer_list> layers_;
};

}  // namespace pipeprop
