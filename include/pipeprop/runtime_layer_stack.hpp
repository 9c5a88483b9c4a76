// pipeprop/runtime_layer_stack.hpp: the passes over ranges of a network's layers, with the network's tables as
// run-time values.
//
// runtime_layer_stack<T> is the part of layer_stack<Net, T> (layer_stack.hpp) that does not depend on the network
// type: forward, backward-p1, backward-p2 and the fused b = 1 update over a range of positions, the buffers of a range
// (layer_buffers.hpp) and the network's per-position tables (parameter and state offsets, activation sizes, node
// names, cut points) as spans. Every pass is one loop over positions that calls each position's layer through the
// entry points of its type (layer_entry_points.hpp), so its code is generated once per value type T, whatever the
// network. Code that holds a `const runtime_layer_stack<T>&` (a pipeline's stages and executors) is therefore
// compiled once for every network; layer_stack<Net, T> adds the compile-time view of the same tables.
//
// Only layer_stack<Net, T> makes one (it owns the layer objects); a runtime_layer_stack<T>& to it stays valid while
// that layer_stack lives.
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
#include "pipeprop/optim/momentum_update.hpp"
#include "pipeprop/runtime_layer_tables.hpp"
#include "pipeprop/seed.hpp"

namespace pipeprop {

/// The layers of a network with value type T and the passes over ranges of them (see the file comment). Made only
/// as the base of a layer_stack<Net, T>; not copyable on its own.
template <class T>
class runtime_layer_stack : public runtime_layer_tables<T> {
    using base = runtime_layer_tables<T>;
    using base::facts_;
    using base::entry_points_;
    using base::address_;
    using base::check_range;

public:
    ///@{
    /// The network's tables (runtime_layer_tables).
    using base::layer_count;
    using base::parameter_count;
    using base::state_count;
    using base::has_weighted_backward_weight;
    using base::parameter_offset;
    using base::state_offset;
    using base::activation_size;
    using base::state_count_of;
    using base::inference_stride;
    using base::activation_bytes;
    using base::workspace_bytes;
    ///@}
    using value_type = T;  ///< The value type T of every node.
    /// Per-micro-batch buffers of one range (layer_buffers.hpp). Move-only.
    using activations = stack_activations<runtime_layer_stack, T>;
    /// Scratch memory of the layers of one range, owned by whoever runs the range (one per thread of execution).
    using workspaces = stack_workspaces<runtime_layer_stack>;

    /// Buffers for one micro-batch of up to max_b samples of range r; the boundaries named by `external` are not
    /// allocated but bound by the caller before a pass (stack_activations::bind_input / bind_output). Throws
    /// std::invalid_argument for an empty or out-of-bounds range or max_b == 0.
    [[nodiscard]] activations make_activations(layer_range r, std::size_t max_b,
                                               external_boundaries external = {}) const {
        return make_activations_with(r, max_b, nullptr, nullptr, external);
    }

    /// Buffers for one more micro-batch of owner's range, max_b and external boundaries whose gradients g(k) are
    /// owner's: only the activations a(k) and the stashes are allocated. For a runner that keeps several
    /// micro-batches' activations of one range (PB's activation slots) but runs at most one backward of the range at
    /// a time, and copies the input gradient out before the next one (a PB stage). owner must outlive the result (and
    /// stay where it is: not moved into or destroyed) and must not be one that shares itself.
    [[nodiscard]] activations make_activations_sharing_gradients(activations& owner) const {
        return make_activations_with(owner.range_, owner.max_b_, owner.g_base_, nullptr, owner.external_);
    }

    /// Buffers for inference (infer only) of micro-batches of up to max_b samples of range r: stashes and no
    /// gradients; a(k) is buffers + (k % 2) * inference_stride(max_b), so buffers [2 inference_stride(max_b)] (the
    /// caller's, aligned for SIMD) serve any number of ranges run one after the other: a range's output is the next
    /// range's input, in place. Throws as make_activations, and for a null buffers.
    [[nodiscard]] activations make_inference_activations(layer_range r, std::size_t max_b, T* buffers) const {
        if (buffers == nullptr)
            throw std::invalid_argument("pipeprop::layer_stack::make_inference_activations: no buffers given");
        activations act = make_activations_with(r, max_b, nullptr, buffers, {});
        for (std::size_t k = r.begin; k <= r.end; ++k)
            act.a_at_[k - r.begin] = buffers + (k % 2) * inference_stride(max_b);
        return act;
    }

    /// Workspaces of the layers of range r for micro-batches of up to max_b samples.
    [[nodiscard]] workspaces make_workspaces(layer_range r, std::size_t max_b) const {
        check_range(r, "make_workspaces");
        workspaces ws;
        ws.ws_.reserve(layer_count);
        for (std::size_t k = 0; k < layer_count; ++k) {
            ws.ws_.push_back(r.contains(k) ? entry_points_[k].make_workspace(address_(k), max_b)
                                           : detail::owned_object(nullptr, [](void*) {}));
            if (r.contains(k)) ws.bytes_ += entry_points_[k].workspace_bytes(address_(k), ws.ws_.back().get());
        }
        return ws;
    }

    /// Initialize the whole network's parameter block w [parameter_count]: layer i is initialized from
    /// derive_seed(seed, i), so a layer's initial weights do not depend on how the network is cut into stages.
    void init_parameters(std::span<T> w, std::uint64_t seed) const {
        if (w.size() != parameter_count)
            throw std::invalid_argument("pipeprop::layer_stack::init_parameters: parameter block has " +
                                        std::to_string(w.size()) + " elements, the network needs " +
                                        std::to_string(parameter_count));
        for (std::size_t i = 0; i < layer_count; ++i)
            if (entry_points_[i].init_parameters != nullptr)
                entry_points_[i].init_parameters(address_(i),
                                                 w.subspan(parameter_offset[i], facts_[i].parameter_count),
                                                 derive_seed(seed, i));
    }

    /// Assigns the initial running state of every stateful layer to s [state_count] (layer i: its slice).
    void init_state(std::span<T> s) const {
        if (s.size() != state_count)
            throw std::invalid_argument("pipeprop::layer_stack::init_state: state block has " +
                                        std::to_string(s.size()) + " elements, the network needs " +
                                        std::to_string(state_count));
        for (std::size_t i = 0; i < layer_count; ++i)
            if (entry_points_[i].init_state != nullptr)
                entry_points_[i].init_state(address_(i), s.subspan(state_offset[i], facts_[i].state_count));
    }

    /// Forward over the range of `act`: reads act.input() [b, input size], assigns every a(k) (but the carried parts
    /// inside a run of carried nodes, which no pass reads: same_run) and the stashes.
    /// w is the range's parameter block [parameter_count_of(range)], state the range's running-state block
    /// [state_count_of(range)] (empty for a range without stateful layers), which the stateful layers update in
    /// sample order. Requires 1 <= b <= act.max_batch(). Throws std::invalid_argument when b is outside
    /// [1, act.max_batch()] (checked here for every layer, built-in or user-defined, so no layer writes past the
    /// buffers its stash and activations were made for) or the state block has the wrong size.
    template <class Range = dynamic_range>
    void forward(std::span<const T> w, activations& act, std::size_t b, workspaces& ws, std::span<T> state = {},
                 Range range = {}) const {
        check_batch(act, b, "forward");
        const layer_range r = loop_range(act, range);
        check_state(state, r, "forward");
        std::size_t first = r.begin;  // the first node of the current run of carried nodes (see same_run)
        for (std::size_t i = r.begin; i < r.end; ++i) {
            const std::size_t c = facts_[i].carry_size;
            const auto forward = c == 0 ? entry_points_[i].forward : entry_points_[i].forward_main;
            forward(address_(i), layer_weights(i, w, r), act.a(i), act.a(i + 1), b, act.stash_at(i), ws.at(i),
                    layer_state(i, state, r));
            if (c == 0) continue;
            if (i == r.begin || !same_run(i - 1, i)) first = i;
            if (i + 1 == r.end || !same_run(i, i + 1))
                std::copy_n(act.a(first) + b * (facts_[first].input_size - c), b * c,
                            act.a(i + 1) + b * (facts_[i].output_size - c));
        }
    }

    /// Evaluation forward over the range of `act`: like forward, but stateful layers run infer with the running
    /// state (read only) and nothing is updated (evaluation changes no state). Throws as forward.
    template <class Range = dynamic_range>
    void infer(std::span<const T> w, activations& act, std::size_t b, workspaces& ws,
               std::span<const T> state = {}, Range range = {}) const {
        check_batch(act, b, "infer");
        const layer_range r = loop_range(act, range);
        check_state(state, r, "infer");
        for (std::size_t i = r.begin; i < r.end; ++i)
            entry_points_[i].infer(address_(i), layer_weights(i, w, r), act.a(i), act.a(i + 1), b,
                                   act.stash_at(i), ws.at(i), layer_state(i, state, r));
    }

    /// Backward-p1 over the range, last layer first: from act.output_gradient() assigns every g(k), k > begin (but,
    /// as forward's a(k), the carried parts inside a run), and g(begin) (the range's input gradient) when
    /// input_gradient_needed (false for the first stage, whose input gradient nobody reads). w: the parameter block
    /// the backward uses (current weights in PB). state: the range's running-state block, as for forward (stateful
    /// layers update it here too; such a layer runs even when its input gradient is not needed, so that its state
    /// advances the same whatever the cut).
    template <class Range = dynamic_range>
    void backward_input(std::span<const T> w, activations& act, std::size_t b, workspaces& ws,
                        bool input_gradient_needed = true, std::span<T> state = {}, Range range = {}) const {
        const layer_range r = loop_range(act, range);
        check_state(state, r, "backward_input");
        for (std::size_t i = r.end; i-- > r.begin;) p1(i, w, act, b, ws, input_gradient_needed, state, r);
    }

    /// Backward-p2 over the range: ADDS every layer's weight gradient into dw [parameter_count_of(range)].
    /// w: the range's weights as backward_input used them (layers with the weighted p2 form read them).
    /// Requires backward_input to have produced the g(k) of this micro-batch.
    template <class Range = dynamic_range>
    void backward_weight(std::span<const T> w, std::span<T> dw, const activations& act, std::size_t b,
                         workspaces& ws, Range range = {}) const {
        const layer_range r = loop_range(act, range);
        for (std::size_t i = r.begin; i < r.end; ++i)
            if (entry_points_[i].backward_weight != nullptr) p2(i, w, dw, act, b, ws, r);
    }
    /// Backward-p2 without the weights, for networks none of whose layers has the weighted p2 form. Throws
    /// std::logic_error for a network with such a layer (layer_stack<Net, T> refuses it at compile time).
    template <class Range = dynamic_range>
    void backward_weight(std::span<T> dw, const activations& act, std::size_t b, workspaces& ws,
                         Range range = {}) const {
        if (has_weighted_backward_weight)
            throw std::logic_error("pipeprop::layer_stack::backward_weight: a layer of this network reads its "
                                   "weights in backward-p2; call backward_weight(w, dw, act, b, ws).");
        backward_weight(std::span<const T>{}, dw, act, b, ws, range);
    }

    /// Fused backward (2BP off): per layer, last first, p1 then p2. Same results as backward_input followed by
    /// backward_weight.
    template <class Range = dynamic_range>
    void backward(std::span<const T> w, std::span<T> dw, activations& act, std::size_t b, workspaces& ws,
                  bool input_gradient_needed = true, std::span<T> state = {}, Range range = {}) const {
        const layer_range r = loop_range(act, range);
        check_state(state, r, "backward");
        for (std::size_t i = r.end; i-- > r.begin;) {
            p1(i, w, act, b, ws, input_gradient_needed, state, r);
            if (entry_points_[i].backward_weight != nullptr) p2(i, w, dw, act, b, ws, r);
        }
    }

    /// Fused backward of ONE sample (b = 1) with the momentum update of the layers that fuse their p2 into it: as
    /// backward(wb, dw, act, 1, ...), except that a layer with fuses_momentum_update updates its part of w and v
    /// [parameter_count_of(range)] in place with coefficients c (after its p1 has read wb; wb may be w) instead of
    /// adding its gradient into dw, whose part of dw is not touched. The other layers' parts of w and v are not
    /// touched: the caller applies their update from dw (unfused_parameter_runs). Together the same bits as
    /// backward followed by optim::momentum_update over the whole block. With update_unfused (for a caller that keeps
    /// no gradient), each other layer's part of dw is zeroed, receives its p2 and is applied to its parts of w and v
    /// at once, while it is in cache: the pass is then the whole update.
    template <class Range = dynamic_range>
    void backward_momentum_update(std::span<const T> wb, std::span<T> dw, std::span<T> w, std::span<T> v,
                                  const optim::update_coefficients<T>& c, activations& act, workspaces& ws,
                                  bool input_gradient_needed = true, std::span<T> state = {},
                                  bool update_unfused = false, Range range = {}) const {
        const layer_range r = loop_range(act, range);
        check_state(state, r, "backward_momentum_update");
        for (std::size_t i = r.end; i-- > r.begin;) {
            p1(i, wb, act, 1, ws, input_gradient_needed, state, r);
            if (entry_points_[i].backward_weight == nullptr) continue;
            const std::size_t off = parameter_offset[i] - parameter_offset[r.begin];
            const std::size_t n = facts_[i].parameter_count;
            if (facts_[i].fuses_momentum_update)
                entry_points_[i].backward_weight_momentum_update(address_(i), w.subspan(off, n),
                                                                 v.subspan(off, n), act.a(i), act.g(i + 1), c);
            else if (!update_unfused)
                p2(i, wb, dw, act, 1, ws, r);
            else {
                std::fill_n(dw.data() + off, n, T(0));
                p2(i, wb, dw, act, 1, ws, r);
                optim::momentum_update(n, w.data() + off, v.data() + off, dw.data() + off, c);
            }
        }
    }

protected:
    /// Made by layer_stack<Net, T> (tables: runtime_layer_tables::tables).
    using typename base::tables;
    ///@{
    /// Made from a network type's tables (layer_stack<Net, T>), or copied as part of a layer_stack copy (which then
    /// points the passes at its own layer objects: bind_layers).
    explicit runtime_layer_stack(const tables& t) noexcept : base(t) {}
    runtime_layer_stack(const runtime_layer_stack&) = default;
    ///@}
    ~runtime_layer_stack() = default;  ///< Not deleted through a base pointer (protected).
    ///@{
    /// The untyped stash of position k in act / workspace of position k in ws (layer_stack's typed accessors).
    static void* stash_address(activations& act, std::size_t k) noexcept { return act.stash_at(k); }
    static void* workspace_address(workspaces& ws, std::size_t k) noexcept { return ws.at(k); }
    ///@}

private:
    // Backward-p1 of layer i of range r. A stateless first layer whose input gradient nobody reads is skipped.
    void p1(std::size_t i, std::span<const T> w, activations& act, std::size_t b, workspaces& ws,
            bool input_gradient_needed, std::span<T> state, layer_range r) const {
        if (i == r.begin && !input_gradient_needed && facts_[i].state_count == 0) return;
        const std::size_t c = facts_[i].carry_size;
        const auto p1 = c == 0 ? entry_points_[i].backward_input : entry_points_[i].backward_input_main;
        p1(address_(i), layer_weights(i, w, r), act.a(i), act.a(i + 1), act.g(i + 1), act.g(i), b, act.stash_at(i),
           ws.at(i), layer_state(i, state, r));
        if (c == 0 || (i > r.begin && same_run(i - 1, i)) || (i == r.begin && !input_gradient_needed)) return;
        std::size_t last = i;  // the run's last node in r: its output gradient holds the carried part
        while (last + 1 < r.end && same_run(last, last + 1)) ++last;
        std::copy_n(act.g(last + 1) + b * (facts_[last].output_size - c), b * c,
                    act.g(i) + b * (facts_[i].input_size - c));
    }
    // Whether adjacent nodes i, j pass the same carried part through (layer_facts::carry_size): forward and p1 run
    // such a run's nodes on their main parts and copy the carried part once per run within the range (a(first) to
    // a(last + 1), g(last + 1) to g(first)), the values a copy by every node gives; none is written inside a run.
    bool same_run(std::size_t i, std::size_t j) const noexcept {
        return facts_[i].carry_size != 0 && facts_[i].carry_size == facts_[j].carry_size;
    }
    // Backward-p2 of layer i (with parameters) of range r into dw [parameter_count_of(r)].
    void p2(std::size_t i, std::span<const T> w, std::span<T> dw, const activations& act, std::size_t b,
            workspaces& ws, layer_range r) const {
        entry_points_[i].backward_weight(address_(i), layer_weights(i, w, r),
                                         dw.subspan(parameter_offset[i] - parameter_offset[r.begin],
                                         facts_[i].parameter_count),
                                         act.a(i), act.a(i + 1), act.g(i + 1), b, act.stash_at(i), ws.at(i));
    }

    static layer_range loop_range(const activations& act, dynamic_range) noexcept { return act.range_; }
    template <std::size_t B, std::size_t E>
    static layer_range loop_range(const activations& act, static_range<B, E>) {
        if (act.range_ != layer_range{B, E}) [[unlikely]]
            throw std::invalid_argument("pipeprop::layer_stack: activations of layers [" +
                                        std::to_string(act.range_.begin) + ", " + std::to_string(act.range_.end) +
                                        ") passed to the code of stage [" + std::to_string(B) + ", " +
                                        std::to_string(E) + ")");
        return act.range_;
    }
    // Layer i's slice of a range's state block (empty for a stateless layer).
    template <class S>
    S layer_state(std::size_t i, S s, layer_range r) const {
        if (facts_[i].state_count == 0) return {};
        return s.subspan(state_offset[i] - state_offset[r.begin], facts_[i].state_count);
    }
    // Throws std::invalid_argument when b is outside [1, the max_b act was made for].
    static void check_batch(const activations& act, std::size_t b, const char* what) {
        if (b == 0 || b > act.max_b_) [[unlikely]]
            throw std::invalid_argument(std::string("pipeprop::layer_stack::") + what + ": micro-batch size b = " +
                                        std::to_string(b) + " is outside [1, " + std::to_string(act.max_b_) +
                                        "], the max_b the activations of layers [" + std::to_string(act.range_.begin) +
                                        ", " + std::to_string(act.range_.end) + ") were made for");
    }
    // Throws std::invalid_argument when state is not the size of range r's running-state block.
    template <class S>
    void check_state(S s, layer_range r, const char* what) const {
        if (state_count > 0) {
            if (s.size() != state_count_of(r)) [[unlikely]]
                throw std::invalid_argument(std::string("pipeprop::layer_stack::") + what + ": the state block of "
                                            "layers [" + std::to_string(r.begin) + ", " + std::to_string(r.end) +
                                            ") has " + std::to_string(s.size()) + " elements, expected " +
                                            std::to_string(state_count_of(r)));
        }
    }
    // Layer i's slice of a range's parameter block (empty when the block is: backward_weight without weights).
    std::span<const T> layer_weights(std::size_t i, std::span<const T> w, layer_range r) const {
        if (w.empty()) return {};
        return w.subspan(parameter_offset[i] - parameter_offset[r.begin], facts_[i].parameter_count);
    }
    // make_activations; with shared_gradients, g(k) points into those instead of buffers of its own. For inference
    // (inference_buffers not null): no gradients, a(k) in the caller's buffers (a_at_ set by the caller).
    [[nodiscard]] activations make_activations_with(layer_range r, std::size_t max_b, T* shared_gradients,
                                                    T* inference_buffers, external_boundaries external) const {
        check_range(r, "make_activations");
        if (max_b == 0) throw std::invalid_argument("pipeprop::layer_stack::make_activations: max_b must be >= 1");
        activations act;
        act.range_ = r;
        act.max_b_ = max_b;
        act.external_ = external;
        act.input_size_ = activation_size[r.begin];
        act.output_size_ = activation_size[r.end];
        act.offset_.resize(r.size() + 2);
        act.a_at_.assign(r.size() + 1, inference_buffers);
        const auto own = [e = external, r](std::size_t k) {  // a(k) allocated here
            return !((k == r.begin && e.input) || (k == r.end && e.output));
        };
        std::size_t off = 0, own_values = 0;  // g(k)'s offsets; the values of the a(k) allocated here
        for (std::size_t k = r.begin; k <= r.end; ++k) {
            act.offset_[k - r.begin] = off;
            off += activation_size[k] * max_b;
            own_values += own(k) ? activation_size[k] * max_b : 0;
        }
        if (inference_buffers == nullptr) {
            act.a_.assign(own_values, T(0));
            for (std::size_t k = r.begin, at = 0; k <= r.end; at += own(k) ? activation_size[k] * max_b : 0, ++k)
                if (own(k)) act.a_at_[k - r.begin] = act.a_.data() + at;
            if (shared_gradients == nullptr) act.g_.assign(off, T(0));
            act.g_base_ = shared_gradients == nullptr ? act.g_.data() : shared_gradients;
        }
        act.bytes_ = (act.a_.size() + act.g_.size()) * sizeof(T);
        act.stashes_.reserve(r.size());
        for (std::size_t k = r.begin; k < r.end; ++k) {
            act.stashes_.push_back(entry_points_[k].make_stash(address_(k), max_b));
            act.bytes_ += entry_points_[k].stash_bytes(address_(k), act.stashes_.back().get());
        }
        return act;
    }
};

}  // namespace pipeprop
