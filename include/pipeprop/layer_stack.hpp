// pipeprop/layer_stack.hpp: runs forward, backward-p1 and backward-p2 over a contiguous range of a network's layers.
//
// This is the one place where layers are called. The sequential trainer runs the whole network as one range; the
// pipeline executors run one range per stage. Parameters of a range are one contiguous block (a slice of the
// network's block, layers in order, each layer's tensors in its parameter_tensors() order).
//
// Buffers of one micro-batch for a range [begin, end) (class activations):
//   a_k for k in [begin, end]: the input of layer k (a_end is the range output), [b, activation_size[k]]
//   g_k for k in [begin, end]: the gradient w.r.t. a_k; g_end is written by the caller (loss or next stage),
//                              g_begin is the range's input gradient (sent to the previous stage).
//   one stash per layer of the range.
// All are allocated once, for up to max_b samples, by make_activations.
#pragma once

#include <boost/mp11/algorithm.hpp>
#include <boost/mp11/list.hpp>
#include <xsimd/memory/xsimd_aligned_allocator.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "pipeprop/layer_concept.hpp"
#include "pipeprop/network.hpp"
#include "pipeprop/seed.hpp"

namespace pipeprop {

/// Half-open range [begin, end) of layer positions of a network.
struct layer_range {
    std::size_t begin = 0;
    std::size_t end = 0;
    [[nodiscard]] constexpr std::size_t size() const noexcept { return end - begin; }
    [[nodiscard]] constexpr bool contains(std::size_t i) const noexcept { return i >= begin && i < end; }
    friend constexpr bool operator==(layer_range, layer_range) = default;
};

/// Range tag of the layer_stack passes: the range of the activations, decided at run time (the dynamic variant).
struct dynamic_range {};
/// Range tag of the layer_stack passes: layers [B, E) known at compile time; the pass is instantiated for exactly
/// these layers (a stage type's code: pipeline_layout.hpp). The activations must be made for the same range.
template <std::size_t B, std::size_t E>
struct static_range {
    static_assert(B < E, "pipeprop::static_range: a stage needs at least one layer.");
    static constexpr layer_range value{B, E};
};

/// Aligned storage for values of type T.
template <class T>
using aligned_vector = std::vector<T, xsimd::aligned_allocator<T>>;

/// The bound layers of network Net with value type T, and the operations over ranges of them.
template <network_type Net, class T>
class layer_stack {
public:
    using network_type = Net;
    using value_type = T;
    using layer_list = typename Net::template layers<T>;
    using layer_tuple = boost::mp11::mp_rename<layer_list, std::tuple>;
    static constexpr std::size_t layer_count = boost::mp11::mp_size<layer_list>::value;
    using input_shape = typename Net::input_shape;
    using output_shape = typename boost::mp11::mp_back<layer_list>::output_shape;

    template <std::size_t I>
    using layer_type = boost::mp11::mp_at_c<layer_list, I>;

    /// parameter_offset[i]: first element of layer i in the network's parameter block; [layer_count] = total.
    static constexpr std::array<std::size_t, layer_count + 1> parameter_offset = [] {
        std::array<std::size_t, layer_count + 1> o{};
        boost::mp11::mp_for_each<boost::mp11::mp_iota_c<layer_count>>(
            [&](auto I) { o[I + 1] = o[I] + layer_type<I>::parameter_count; });
        return o;
    }();
    static constexpr std::size_t parameter_count = parameter_offset[layer_count];

    /// activation_size[k]: per-sample elements of the input of layer k; [layer_count] = network output size.
    static constexpr std::array<std::size_t, layer_count + 1> activation_size = [] {
        std::array<std::size_t, layer_count + 1> a{};
        boost::mp11::mp_for_each<boost::mp11::mp_iota_c<layer_count>>([&](auto I) {
            a[I] = layer_type<I>::input_shape::size;
            a[I + 1] = layer_type<I>::output_shape::size;
        });
        return a;
    }();

    /// node_names[i]: hierarchical name of node i, e.g. "layer_03.body_01" (graph/node_path.hpp).
    static constexpr std::array<std::string_view, layer_count> node_names = [] {
        std::array<std::string_view, layer_count> n{};
        boost::mp11::mp_for_each<boost::mp11::mp_iota_c<layer_count>>(
            [&](auto I) { n[I] = node_name_v<boost::mp11::mp_at_c<typename Net::template paths<T>, I>>; });
        return n;
    }();

    /// cut_allowed_before[i]: a stage boundary may be put in front of node i (false for the layers of a projection
    /// shortcut and the add after them, which share the add's stage: pb-semantics.md §6); [0] is true.
    static constexpr std::array<bool, layer_count> cut_allowed_before = [] {
        std::array<bool, layer_count> c{};
        boost::mp11::mp_for_each<boost::mp11::mp_iota_c<layer_count>>([&](auto I) {
            using L = layer_type<I>;
            if constexpr (requires { L::cut_allowed_before; })
                c[I] = L::cut_allowed_before;
            else
                c[I] = true;
            // The add of a projection block follows its shortcut's last layer: it stays in that layer's stage.
            if constexpr (I > 0) {
                using prev = layer_type<I - 1>;
                if constexpr (requires { prev::cut_allowed_before; }) c[I] = c[I] && prev::cut_allowed_before;
            }
        });
        c[0] = true;
        return c;
    }();

    /// state_offset[i]: first element of layer i in the network's running-state block (stateful layers,
    /// layer_concept.hpp); [layer_count] = total.
    static constexpr std::array<std::size_t, layer_count + 1> state_offset = [] {
        std::array<std::size_t, layer_count + 1> o{};
        boost::mp11::mp_for_each<boost::mp11::mp_iota_c<layer_count>>(
            [&](auto I) { o[I + 1] = o[I] + state_count_v<layer_type<I>>; });
        return o;
    }();
    /// Elements of the network's running-state block (0 when no layer has state).
    static constexpr std::size_t state_count = state_offset[layer_count];

    /// Elements of the running-state block of range r.
    static constexpr std::size_t state_count_of(layer_range r) noexcept {
        return state_offset[r.end] - state_offset[r.begin];
    }

    /// True when some layer has the weighted backward-p2 form (layer_concept.hpp).
    static constexpr bool has_weighted_backward_weight = [] {
        bool any = false;
        boost::mp11::mp_for_each<boost::mp11::mp_iota_c<layer_count>>([&](auto I) {
            using L = layer_type<I>;
            if constexpr (L::parameter_count > 0) {
                if constexpr (requires { typename L::layer_type; })
                    any = any || layer_has_weighted_backward_weight<typename L::layer_type>;
                else
                    any = any || layer_has_weighted_backward_weight<L>;
            }
        });
        return any;
    }();

    /// has_parameters[i]: layer i has a non-empty parameter block.
    static constexpr std::array<bool, layer_count> has_parameters = [] {
        std::array<bool, layer_count> p{};
        boost::mp11::mp_for_each<boost::mp11::mp_iota_c<layer_count>>(
            [&](auto I) { p[I] = layer_type<I>::parameter_count > 0; });
        return p;
    }();

    /// normalizes[i]: layer i is a normalization layer (declares `normalization = true`, layer_concept.hpp).
    static constexpr std::array<bool, layer_count> normalizes = [] {
        std::array<bool, layer_count> n{};
        boost::mp11::mp_for_each<boost::mp11::mp_iota_c<layer_count>>([&](auto I) {
            using L = layer_type<I>;
            if constexpr (requires { typename L::layer_type; })
                n[I] = is_normalization_layer<typename L::layer_type>;
            else
                n[I] = is_normalization_layer<L>;
        });
        return n;
    }();

    /// The whole network as one range.
    static constexpr layer_range all() noexcept { return {0, layer_count}; }

    /// Elements of the parameter block of range r.
    static constexpr std::size_t parameter_count_of(layer_range r) noexcept {
        return parameter_offset[r.end] - parameter_offset[r.begin];
    }

    /// Per-micro-batch buffers of one range (see file comment). Move-only; allocated once.
    class activations {
    public:
        activations() = default;
        activations(activations&&) noexcept = default;
        activations& operator=(activations&&) noexcept = default;

        [[nodiscard]] layer_range range() const noexcept { return range_; }
        [[nodiscard]] std::size_t max_batch() const noexcept { return max_b_; }
        /// Input of layer k (k in [begin, end]), [b, activation_size[k]].
        [[nodiscard]] T* a(std::size_t k) noexcept { return a_.data() + offset_[k - range_.begin]; }
        [[nodiscard]] const T* a(std::size_t k) const noexcept { return a_.data() + offset_[k - range_.begin]; }
        /// Gradient w.r.t. a(k) (in the owner's buffers when made by make_activations_sharing_gradients).
        [[nodiscard]] T* g(std::size_t k) noexcept { return g_base_ + offset_[k - range_.begin]; }
        [[nodiscard]] const T* g(std::size_t k) const noexcept { return g_base_ + offset_[k - range_.begin]; }
        [[nodiscard]] T* input() noexcept { return a(range_.begin); }
        [[nodiscard]] T* output() noexcept { return a(range_.end); }
        [[nodiscard]] const T* output() const noexcept { return a(range_.end); }
        [[nodiscard]] T* output_gradient() noexcept { return g(range_.end); }
        [[nodiscard]] T* input_gradient() noexcept { return g(range_.begin); }
        [[nodiscard]] const T* input_gradient() const noexcept { return g(range_.begin); }
        /// Per-sample elements of the range input / output.
        [[nodiscard]] std::size_t input_size() const noexcept { return activation_size[range_.begin]; }
        [[nodiscard]] std::size_t output_size() const noexcept { return activation_size[range_.end]; }

        /// Bytes this object holds for one micro-batch: its activations a(k), its own gradients g(k) (none when it
        /// shares another's) and its layers' stashes (the "stash bytes" of PB).
        [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }
        /// Bytes of the gradient buffers g(k) it owns: as many as of a(k), or 0 when it shares another's.
        [[nodiscard]] std::size_t gradient_bytes() const noexcept { return g_.size() * sizeof(T); }

        template <std::size_t I>
        [[nodiscard]] stash_t<layer_type<I>>& stash() noexcept {
            return *std::get<I>(stashes_);
        }
        template <std::size_t I>
        [[nodiscard]] const stash_t<layer_type<I>>& stash() const noexcept {
            return *std::get<I>(stashes_);
        }

    private:
        friend class layer_stack;
        layer_range range_{};
        std::size_t max_b_ = 0;
        std::size_t bytes_ = 0;
        std::vector<std::size_t> offset_;
        aligned_vector<T> a_;
        aligned_vector<T> g_;  // empty when the gradients are another object's
        T* g_base_ = nullptr;  // g_.data(), or the owner's (a moved vector keeps its buffer, so moves keep it valid)
        boost::mp11::mp_rename<boost::mp11::mp_transform<std::optional, boost::mp11::mp_transform<stash_t, layer_list>>,
                               std::tuple>
            stashes_;
    };

    /// Scratch memory of the layers of one range, owned by whoever runs the range (one per thread of execution).
    class workspaces {
    public:
        workspaces() = default;
        workspaces(workspaces&&) noexcept = default;
        workspaces& operator=(workspaces&&) noexcept = default;
        template <std::size_t I>
        [[nodiscard]] workspace_t<layer_type<I>>& get() noexcept {
            return *std::get<I>(ws_);
        }

    private:
        friend class layer_stack;
        boost::mp11::mp_rename<
            boost::mp11::mp_transform<std::optional, boost::mp11::mp_transform<workspace_t, layer_list>>, std::tuple>
            ws_;
    };

    layer_stack() = default;

    [[nodiscard]] const layer_tuple& layers() const noexcept { return layers_; }

    /// Buffers for one micro-batch of up to max_b samples of range r. Throws std::invalid_argument for an empty or
    /// out-of-bounds range or max_b == 0.
    [[nodiscard]] activations make_activations(layer_range r, std::size_t max_b) const {
        return make_activations_with(r, max_b, nullptr);
    }

    /// Buffers for one more micro-batch of owner's range and max_b whose gradients g(k) are owner's: only the
    /// activations a(k) and the stashes are allocated. For a runner that keeps several micro-batches' activations of
    /// one range (PB's activation slots) but runs at most one backward of the range at a time, and copies the input
    /// gradient out before the next one (a PB stage: issue 16 item 4). owner must outlive the result (and stay where
    /// it is: not moved into or destroyed) and must not be one that shares itself.
    [[nodiscard]] activations make_activations_sharing_gradients(activations& owner) const {
        return make_activations_with(owner.range_, owner.max_b_, owner.g_base_);
    }

    /// Workspaces of the layers of range r for micro-batches of up to max_b samples.
    [[nodiscard]] workspaces make_workspaces(layer_range r, std::size_t max_b) const {
        check_range(r, "make_workspaces");
        workspaces ws;
        for_each_in(r, [&](auto I) {
            std::get<I>(ws.ws_).emplace(pipeprop::make_workspace(std::get<I>(layers_), max_b));
        });
        return ws;
    }

    /// Initialize the whole network's parameter block w [parameter_count]: layer i is initialized from
    /// derive_seed(seed, i), so a layer's initial weights do not depend on how the network is cut into stages.
    void init_parameters(std::span<T> w, std::uint64_t seed) const {
        if (w.size() != parameter_count)
            throw std::invalid_argument("pipeprop::layer_stack::init_parameters: parameter block has " +
                                        std::to_string(w.size()) + " elements, the network needs " +
                                        std::to_string(parameter_count));
        boost::mp11::mp_for_each<boost::mp11::mp_iota_c<layer_count>>([&](auto I) {
            if constexpr (layer_type<I>::parameter_count > 0)
                std::get<I>(layers_).init_parameters(
                    w.subspan(parameter_offset[I], layer_type<I>::parameter_count), derive_seed(seed, I));
        });
    }

    /// Assigns the initial running state of every stateful layer to s [state_count] (layer i: its slice).
    void init_state(std::span<T> s) const {
        if (s.size() != state_count)
            throw std::invalid_argument("pipeprop::layer_stack::init_state: state block has " +
                                        std::to_string(s.size()) + " elements, the network needs " +
                                        std::to_string(state_count));
        boost::mp11::mp_for_each<boost::mp11::mp_iota_c<layer_count>>([&](auto I) {
            if constexpr (state_count_v<layer_type<I>> > 0)
                std::get<I>(layers_).init_state(s.subspan(state_offset[I], state_count_v<layer_type<I>>));
        });
    }

    /// Forward over the range of `act`: reads act.input() [b, input size], assigns every a(k) and the stashes.
    /// w is the range's parameter block [parameter_count_of(range)], state the range's running-state block
    /// [state_count_of(range)] (empty for a range without stateful layers), which the stateful layers update in
    /// sample order. Requires 1 <= b <= act.max_batch(). Throws std::invalid_argument when b is outside
    /// [1, act.max_batch()] (checked here for every layer, built-in or user-defined, so no layer writes past the
    /// buffers its stash and activations were made for) or the state block has the wrong size.
    template <class Range = dynamic_range>
    void forward(std::span<const T> w, activations& act, std::size_t b, workspaces& ws, std::span<T> state = {},
                 Range range = {}) const {
        if (b == 0 || b > act.max_b_) [[unlikely]]
            throw std::invalid_argument("pipeprop::layer_stack::forward: micro-batch size b = " + std::to_string(b) +
                                        " is outside [1, " + std::to_string(act.max_b_) +
                                        "], the max_b the activations of layers [" + std::to_string(act.range_.begin) +
                                        ", " + std::to_string(act.range_.end) + ") were made for");
        const layer_range r = act.range_;
        check_state(state, r, "forward");
        for_each_in(loop_range(act, range), [&](auto I) {
            if constexpr (state_count_v<layer_type<I>> > 0)
                std::get<I>(layers_).forward(layer_weights<I>(w, r), act.a(I), act.a(I + 1), b,
                                             act.template stash<I>(), ws.template get<I>(), layer_state<I>(state, r));
            else
                std::get<I>(layers_).forward(layer_weights<I>(w, r), act.a(I), act.a(I + 1), b,
                                             act.template stash<I>(), ws.template get<I>());
        });
    }

    /// Evaluation forward over the range of `act`: like forward, but stateful layers run infer with the running
    /// state (read only) and nothing is updated (pitfalls.md item 6). Throws as forward.
    template <class Range = dynamic_range>
    void infer(std::span<const T> w, activations& act, std::size_t b, workspaces& ws,
               std::span<const T> state = {}, Range range = {}) const {
        if (b == 0 || b > act.max_b_) [[unlikely]]
            throw std::invalid_argument("pipeprop::layer_stack::infer: micro-batch size b = " + std::to_string(b) +
                                        " is outside [1, " + std::to_string(act.max_b_) + "]");
        const layer_range r = act.range_;
        check_state(state, r, "infer");
        for_each_in(loop_range(act, range), [&](auto I) {
            if constexpr (state_count_v<layer_type<I>> > 0)
                std::get<I>(layers_).infer(layer_weights<I>(w, r), act.a(I), act.a(I + 1), b, ws.template get<I>(),
                                           state.subspan(state_offset[I] - state_offset[r.begin],
                                                         state_count_v<layer_type<I>>));
            else
                std::get<I>(layers_).forward(layer_weights<I>(w, r), act.a(I), act.a(I + 1), b,
                                             act.template stash<I>(), ws.template get<I>());
        });
    }

    /// Backward-p1 over the range, last layer first: from act.output_gradient() assigns every g(k), k > begin,
    /// and g(begin) (the range's input gradient) when input_gradient_needed (false for the first stage, whose input
    /// gradient nobody reads). w: the parameter block the backward uses (current weights in PB).
    /// state: the range's running-state block, as for forward (stateful layers update it here too; such a layer
    /// runs even when its input gradient is not needed, so that its state advances the same whatever the cut).
    template <class Range = dynamic_range>
    void backward_input(std::span<const T> w, activations& act, std::size_t b, workspaces& ws,
                        bool input_gradient_needed = true, std::span<T> state = {}, Range range = {}) const {
        const layer_range r = act.range_;
        check_state(state, r, "backward_input");
        for_each_in_reverse(loop_range(act, range), [&](auto I) {
            if constexpr (state_count_v<layer_type<I>> > 0) {
                std::get<I>(layers_).backward_input(layer_weights<I>(w, r), act.a(I), act.a(I + 1), act.g(I + 1),
                                                    act.g(I), b, act.template stash<I>(), ws.template get<I>(),
                                                    layer_state<I>(state, r));
            } else {
                if (I == r.begin && !input_gradient_needed) return;
                std::get<I>(layers_).backward_input(layer_weights<I>(w, r), act.a(I), act.a(I + 1), act.g(I + 1),
                                                    act.g(I), b, act.template stash<I>(), ws.template get<I>());
            }
        });
    }

    /// Backward-p2 over the range: ADDS every layer's weight gradient into dw [parameter_count_of(range)].
    /// w: the range's weights as backward_input used them (layers with the weighted p2 form read them).
    /// Requires backward_input to have produced the g(k) of this micro-batch.
    template <class Range = dynamic_range>
    void backward_weight(std::span<const T> w, std::span<T> dw, const activations& act, std::size_t b,
                         workspaces& ws, Range range = {}) const {
        const layer_range r = act.range_;
        for_each_in(loop_range(act, range), [&](auto I) {
            if constexpr (layer_type<I>::parameter_count > 0)
                call_backward_weight(
                    std::get<I>(layers_), layer_weights<I>(w, r),
                    dw.subspan(parameter_offset[I] - parameter_offset[r.begin], layer_type<I>::parameter_count),
                    act.a(I), act.a(I + 1), act.g(I + 1), b, act.template stash<I>(), ws.template get<I>());
        });
    }
    /// Backward-p2 without the weights, for networks none of whose layers has the weighted p2 form.
    template <class Range = dynamic_range>
    void backward_weight(std::span<T> dw, const activations& act, std::size_t b, workspaces& ws,
                         Range range = {}) const {
        static_assert(!has_weighted_backward_weight,
                      "pipeprop::layer_stack::backward_weight: a layer of this network reads its weights in "
                      "backward-p2; call backward_weight(w, dw, act, b, ws).");
        backward_weight(std::span<const T>{}, dw, act, b, ws, range);
    }

    /// Fused backward (2BP off): per layer, last first, p1 then p2. Same results as backward_input followed by
    /// backward_weight.
    template <class Range = dynamic_range>
    void backward(std::span<const T> w, std::span<T> dw, activations& act, std::size_t b, workspaces& ws,
                  bool input_gradient_needed = true, std::span<T> state = {}, Range range = {}) const {
        backward_layers(w, act, b, ws, input_gradient_needed, state, range, "backward", [&](auto I, auto& l) {
            const layer_range r = act.range_;
            call_backward_weight(
                l, layer_weights<I>(w, r),
                dw.subspan(parameter_offset[I] - parameter_offset[r.begin], layer_type<I>::parameter_count), act.a(I),
                act.a(I + 1), act.g(I + 1), b, act.template stash<I>(), ws.template get<I>());
        });
    }

    /// True when layer I updates its weights in backward_momentum_update (layer_has_fused_momentum_update).
    template <std::size_t I>
    static constexpr bool fuses_momentum_update =
        layer_type<I>::parameter_count > 0 && layer_has_fused_momentum_update<layer_type<I>>;

    /// True when some layer of range r updates its weights in backward_momentum_update.
    static constexpr bool fuses_momentum_update_in(layer_range r) noexcept {
        bool any = false;
        boost::mp11::mp_for_each<boost::mp11::mp_iota_c<layer_count>>([&](auto I) {
            if constexpr (fuses_momentum_update<I>) any = any || r.contains(I);
        });
        return any;
    }

    /// The parts of range r's parameter block [parameter_count_of(r)] that backward_momentum_update does NOT update,
    /// as {offset in the block, count} in order (the whole block, or nothing for a parameter-free range, when no
    /// layer of r fuses). Setup time (allocates).
    static std::vector<std::pair<std::size_t, std::size_t>> unfused_parameter_runs(layer_range r) {
        std::vector<std::pair<std::size_t, std::size_t>> runs;
        std::size_t start = parameter_offset[r.begin];
        boost::mp11::mp_for_each<boost::mp11::mp_iota_c<layer_count>>([&](auto I) {
            if constexpr (fuses_momentum_update<I>) {
                if (!r.contains(I)) return;
                if (parameter_offset[I] > start)
                    runs.emplace_back(start - parameter_offset[r.begin], parameter_offset[I] - start);
                start = parameter_offset[I + 1];
            }
        });
        if (parameter_offset[r.end] > start)
            runs.emplace_back(start - parameter_offset[r.begin], parameter_offset[r.end] - start);
        return runs;
    }

    /// Fused backward of ONE sample (b = 1) with the momentum update of the layers that fuse their p2 into it
    /// (issue 16 item 1): as backward(wb, dw, act, 1, ...), except that a layer with fuses_momentum_update updates
    /// its part of w and v [parameter_count_of(range)] in place with coefficients c (after its p1 has read wb; wb
    /// may be w) instead of adding its gradient into dw, whose part of dw is not touched. The other layers' parts
    /// of w and v are not touched: the caller applies their update from dw (unfused_parameter_runs). Together the
    /// same bits as backward followed by optim::momentum_update over the whole block.
    template <class Range = dynamic_range>
    void backward_momentum_update(std::span<const T> wb, std::span<T> dw, std::span<T> w, std::span<T> v,
                                  const optim::update_coefficients<T>& c, activations& act, workspaces& ws,
                                  bool input_gradient_needed = true, std::span<T> state = {}, Range range = {}) const {
        backward_layers(wb, act, 1, ws, input_gradient_needed, state, range, "backward_momentum_update",
                        [&](auto I, auto& l) {
                            constexpr std::size_t P = layer_type<I>::parameter_count;
                            const std::size_t off = parameter_offset[I] - parameter_offset[act.range_.begin];
                            if constexpr (fuses_momentum_update<I>)
                                l.backward_weight_momentum_update(w.subspan(off, P), v.subspan(off, P), act.a(I),
                                                                  act.g(I + 1), c);
                            else
                                call_backward_weight(l, layer_weights<I>(wb, act.range_), dw.subspan(off, P),
                                                     act.a(I), act.a(I + 1), act.g(I + 1), std::size_t{1},
                                                     act.template stash<I>(), ws.template get<I>());
                        });
    }

    /// Calls f(std::integral_constant<std::size_t, I>) for each layer position I in [B, E), in order: the loop of a
    /// stage whose layers are known at compile time (no per-layer range test).
    template <std::size_t B, std::size_t E, class F>
    static void for_each_in(static_range<B, E>, F&& f) {
        boost::mp11::mp_for_each<boost::mp11::mp_iota_c<E - B>>(
            [&](auto K) { f(std::integral_constant<std::size_t, B + K>{}); });
    }
    /// Same, last layer first.
    template <std::size_t B, std::size_t E, class F>
    static void for_each_in_reverse(static_range<B, E>, F&& f) {
        boost::mp11::mp_for_each<boost::mp11::mp_reverse<boost::mp11::mp_iota_c<E - B>>>(
            [&](auto K) { f(std::integral_constant<std::size_t, B + K>{}); });
    }
    /// Calls f(std::integral_constant<std::size_t, I>) for each layer position I in r, in order.
    template <class F>
    static void for_each_in(layer_range r, F&& f) {
        boost::mp11::mp_for_each<boost::mp11::mp_iota_c<layer_count>>([&](auto I) {
            if (r.contains(I)) f(I);
        });
    }
    /// Same as for_each_in, last layer first.
    template <class F>
    static void for_each_in_reverse(layer_range r, F&& f) {
        boost::mp11::mp_for_each<boost::mp11::mp_reverse<boost::mp11::mp_iota_c<layer_count>>>([&](auto I) {
            if (r.contains(I)) f(I);
        });
    }

private:
    // The fused backward's loop: per layer, last first, p1 (as backward_input), then p2(I, layer) for a layer with
    // parameters.
    template <class Range, class P2>
    void backward_layers(std::span<const T> w, activations& act, std::size_t b, workspaces& ws,
                         bool input_gradient_needed, std::span<T> state, Range range, const char* what,
                         P2&& p2) const {
        const layer_range r = act.range_;
        check_state(state, r, what);
        for_each_in_reverse(loop_range(act, range), [&](auto I) {
            auto& l = std::get<I>(layers_);
            if constexpr (state_count_v<layer_type<I>> > 0)
                l.backward_input(layer_weights<I>(w, r), act.a(I), act.a(I + 1), act.g(I + 1), act.g(I), b,
                                 act.template stash<I>(), ws.template get<I>(), layer_state<I>(state, r));
            else if (I != r.begin || input_gradient_needed)
                l.backward_input(layer_weights<I>(w, r), act.a(I), act.a(I + 1), act.g(I + 1), act.g(I), b,
                                 act.template stash<I>(), ws.template get<I>());
            if constexpr (layer_type<I>::parameter_count > 0) p2(I, l);
        });
    }

    static layer_range loop_range(const activations& act, dynamic_range) noexcept { return act.range_; }
    template <std::size_t B, std::size_t E>
    static static_range<B, E> loop_range(const activations& act, static_range<B, E> r) {
        if (act.range_ != layer_range{B, E}) [[unlikely]]
            throw std::invalid_argument("pipeprop::layer_stack: activations of layers [" +
                                        std::to_string(act.range_.begin) + ", " + std::to_string(act.range_.end) +
                                        ") passed to the code of stage [" + std::to_string(B) + ", " +
                                        std::to_string(E) + ")");
        return r;
    }
    template <std::size_t I>
    static std::span<T> layer_state(std::span<T> s, layer_range r) {
        return s.subspan(state_offset[I] - state_offset[r.begin], state_count_v<layer_type<I>>);
    }
    template <class S>
    static void check_state(S s, layer_range r, const char* what) {
        if constexpr (state_count > 0) {
            if (s.size() != state_count_of(r)) [[unlikely]]
                throw std::invalid_argument(std::string("pipeprop::layer_stack::") + what + ": the state block of "
                                            "layers [" + std::to_string(r.begin) + ", " + std::to_string(r.end) +
                                            ") has " + std::to_string(s.size()) + " elements, expected " +
                                            std::to_string(state_count_of(r)));
        }
    }
    template <std::size_t I>
    static std::span<const T> layer_weights(std::span<const T> w, layer_range r) {
        if (w.empty()) return {};  // backward_weight without weights (no layer of the network reads them)
        return w.subspan(parameter_offset[I] - parameter_offset[r.begin], layer_type<I>::parameter_count);
    }
    // make_activations; with shared_gradients, g(k) points into those instead of buffers of its own.
    [[nodiscard]] activations make_activations_with(layer_range r, std::size_t max_b, T* shared_gradients) const {
        check_range(r, "make_activations");
        if (max_b == 0) throw std::invalid_argument("pipeprop::layer_stack::make_activations: max_b must be >= 1");
        activations act;
        act.range_ = r;
        act.max_b_ = max_b;
        act.offset_.resize(r.size() + 2);
        std::size_t off = 0;
        for (std::size_t k = r.begin; k <= r.end; ++k) {
            act.offset_[k - r.begin] = off;
            off += activation_size[k] * max_b;
        }
        act.a_.assign(off, T(0));
        if (shared_gradients == nullptr) act.g_.assign(off, T(0));
        act.g_base_ = shared_gradients == nullptr ? act.g_.data() : shared_gradients;
        act.bytes_ = (act.a_.size() + act.g_.size()) * sizeof(T);
        for_each_in(r, [&](auto I) {
            auto& st = std::get<I>(act.stashes_);
            st.emplace(pipeprop::make_stash(std::get<I>(layers_), max_b));
            act.bytes_ += pipeprop::stash_bytes(std::get<I>(layers_), *st);
        });
        return act;
    }

    static void check_range(layer_range r, const char* what) {
        if (r.begin >= r.end || r.end > layer_count)
            throw std::invalid_argument(std::string("pipeprop::layer_stack::") + what + ": range [" +
                                        std::to_string(r.begin) + ", " + std::to_string(r.end) +
                                        ") is empty or exceeds the " + std::to_string(layer_count) + " layers");
    }

    layer_tuple layers_{};
};

}  // namespace pipeprop
