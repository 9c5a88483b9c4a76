// pipeprop/pipeline_layout.hpp: a static pipeline: a network cut into stages at compile time, with the
// per-stage gradient delays of Pipelined Backpropagation as compile-time constants.
//
// PB-paper (Kosson et al., arXiv 2003.11666, §3; docs/pb-semantics.md §1): with S stages, stage s (0-based,
// 0 = input side) applies the gradient of a micro-batch D_s = 2 (S - 1 - s) updates after the weights its forward
// used; it holds D_s + 1 micro-batches in flight.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <boost/mp11/algorithm.hpp>

#include "pipeprop/layer_stack.hpp"

namespace pipeprop {

/// Stage boundaries given as explicit split points: split_at<2, 5> over 8 layers gives stages [0,2), [2,5), [5,8).
/// Static-asserts (in pipeline_layout) that the points are strictly increasing and inside (0, layer count).
template <std::size_t... SplitPoints>
struct split_at {
    /// The split points: stage s + 1 starts at layer points[s].
    static constexpr std::array<std::size_t, sizeof...(SplitPoints)> points{SplitPoints...};
};

/// Where fine-grained partitioning puts parameter-free layers (relu, pooling, flatten).
enum class parameter_free {
    attach,     ///< to the stage of the parametric layer before them (leading ones: to the first stage)
    own_stage,  ///< each layer is its own stage
};

/// Where fine-grained partitioning puts normalization layers (group norm, Online Normalization, RMSNorm: layers
/// declaring `normalization = true`, layer_concept.hpp).
enum class normalization_layers {
    own_stage,  ///< a parametric normalization layer starts a stage like any parametric layer
    attach,     ///< to the stage of the layer before it (the conv / dense layer it normalizes)
};

/// Fine-grained partition: every parametric layer starts its own stage (PB-paper §3: "fine-grained pipelines").
/// With Norms = normalization_layers::attach only the weight layers (conv, dense, attention, ...) start stages.
template <parameter_free Mode = parameter_free::attach, normalization_layers Norms = normalization_layers::own_stage>
struct fine_grained {};

/// The PB paper's fine-grained ResNets (§5): every conv or dense layer is a stage, holding the normalization and
/// the parameter-free layers after it (ResNet-20: 20 stages; a projection shortcut joins its add's stage).
using weight_layer_stages = fine_grained<parameter_free::attach, normalization_layers::attach>;

/// Delay of stage s in a pipeline of S stages: D_s = 2 (S - 1 - s) (docs/pb-semantics.md §1).
[[nodiscard]] constexpr std::size_t pb_delay(std::size_t s, std::size_t stage_count) noexcept {
    return 2 * (stage_count - 1 - s);
}

namespace detail {
template <std::size_t L, class Partition>
struct partition_boundaries;

template <std::size_t L, std::size_t... P>
struct partition_boundaries<L, split_at<P...>> {
    static constexpr bool increasing = [] {
        constexpr std::array<std::size_t, sizeof...(P)> p{P...};
        for (std::size_t i = 0; i < p.size(); ++i) {
            if (p[i] == 0 || p[i] >= L) return false;
            if (i > 0 && p[i] <= p[i - 1]) return false;
        }
        return true;
    }();
    static_assert(increasing, "pipeprop::split_at: split points must be strictly increasing and lie strictly "
                              "between 0 and the number of layers (no empty stage, no layer dropped).");
    static constexpr std::array<std::size_t, sizeof...(P) + 2> value{0, P..., L};
};

/// Whether fine-grained partitioning starts a stage at node i (see fine_grained).
template <class Stack>
constexpr bool fine_stage_starts(std::size_t i, bool own_stage, bool attach_norms, bool first_parametric_seen) {
    if (!Stack::cut_allowed_before[i]) return false;
    if (attach_norms && Stack::normalizes[i]) return false;
    if (own_stage) return i > 0;
    return Stack::has_parameters[i] && first_parametric_seen;
}

template <std::size_t L, class Stack>
constexpr std::size_t fine_stage_count(bool own_stage, bool attach_norms) {
    std::size_t n = 1;
    bool seen = false;
    for (std::size_t i = 0; i < L; ++i) {
        if (fine_stage_starts<Stack>(i, own_stage, attach_norms, seen)) ++n;
        if (Stack::has_parameters[i]) seen = true;
    }
    return n;
}

template <class Stack, std::size_t... P>
constexpr bool cuts_allowed() {
    return ((Stack::cut_allowed_before[P]) && ...);
}
}  // namespace detail

/// A network cut into stages, all at compile time. T is the value type the stages run in.
/// Members: stage_count, boundaries (stage s is layers [boundaries[s], boundaries[s+1])), delays (D_s), stage(s).
template <network_type Net, class Partition, class T = float>
struct pipeline_layout;

template <network_type Net, std::size_t... P, class T>
/// The layout of split_at<P...>: stage s is layers [boundaries[s], boundaries[s + 1]), with boundaries {0, P..., layer
/// count}. Static-asserts that the points increase strictly, lie inside (0, layer count) and cut nowhere a projection
/// shortcut forbids (docs/pb-semantics.md §6).
struct pipeline_layout<Net, split_at<P...>, T> {
    /// The network's layer stack (layer_stack<Net, T>): its flat list of nodes.
    using stack_type = layer_stack<Net, T>;
    static constexpr std::size_t layer_count = stack_type::layer_count;  ///< Number of nodes of the flattened network.
    /// Stage boundaries [stage_count + 1]: stage s is layers [boundaries[s], boundaries[s + 1]).
    static constexpr auto boundaries = detail::partition_boundaries<layer_count, split_at<P...>>::value;
    static_assert(detail::cuts_allowed<stack_type, P...>(),
                  "pipeprop::split_at: a split point lies inside a projection shortcut or right before its add: the "
                  "shortcut's layers share the stage of the block's add (docs/pb-semantics.md section 6).");
    static constexpr std::size_t stage_count = boundaries.size() - 1;  ///< Number of stages S (split points + 1).
    /// PB gradient delays [stage_count]: D_s = 2 (S - 1 - s) updates between a micro-batch's forward and backward at
    /// stage s (PB paper §3; pb_delay).
    static constexpr std::array<std::size_t, stage_count> delays = [] {
        std::array<std::size_t, stage_count> d{};
        for (std::size_t s = 0; s < stage_count; ++s) d[s] = pb_delay(s, stage_count);
        return d;
    }();
    /// The layers of stage s, [boundaries[s], boundaries[s + 1]) (s < stage_count, unchecked).
    static constexpr layer_range stage(std::size_t s) noexcept { return {boundaries[s], boundaries[s + 1]}; }
};

template <network_type Net, parameter_free Mode, normalization_layers Norms, class T>
/// The fine-grained layout (PB paper §3): every parametric layer starts a stage; parameter-free layers attach to the
/// stage before them or get their own (Mode), normalization layers start a stage or attach (Norms); nodes that may not
/// start a stage (a projection shortcut and its add, docs/pb-semantics.md §6) join the stage before them.
struct pipeline_layout<Net, fine_grained<Mode, Norms>, T> {
    using stack_type = layer_stack<Net, T>;  ///< The network's layer stack (layer_stack<Net, T>).
    /// Number of nodes of the flattened network.
    static constexpr std::size_t layer_count = stack_type::layer_count;
    /// True for parameter_free::own_stage: every parameter-free layer is its own stage.
    static constexpr bool own_stage = Mode == parameter_free::own_stage;
    /// True for normalization_layers::attach: normalization layers join the stage before them.
    static constexpr bool attach_norms = Norms == normalization_layers::attach;
    static constexpr std::size_t stage_count =  ///< Number of stages S: the number of layers that start a stage.
        detail::fine_stage_count<layer_count, stack_type>(own_stage, attach_norms);
    /// Stage boundaries [stage_count + 1]: stage s is layers [boundaries[s], boundaries[s + 1]).
    static constexpr std::array<std::size_t, stage_count + 1> boundaries = [] {
        std::array<std::size_t, stage_count + 1> b{};
        // Stage starts: for own_stage, every layer; for attach, every parametric layer except that the first stage
        // always starts at 0 (leading parameter-free layers attach to it).
        // Nodes that may not start a stage (a projection shortcut's layers and its add: docs/pb-semantics.md §6) join
        // the stage before them.
        std::size_t s = 0;
        b[0] = 0;
        bool first_parametric_seen = false;
        for (std::size_t i = 0; i < layer_count; ++i) {
            if (detail::fine_stage_starts<stack_type>(i, own_stage, attach_norms, first_parametric_seen))
                b[++s] = i;
            if (stack_type::has_parameters[i]) first_parametric_seen = true;
        }
        b[stage_count] = layer_count;
        return b;
    }();
    /// PB gradient delays [stage_count]: D_s = 2 (S - 1 - s) (PB paper §3; pb_delay).
    static constexpr std::array<std::size_t, stage_count> delays = [] {
        std::array<std::size_t, stage_count> d{};
        for (std::size_t s = 0; s < stage_count; ++s) d[s] = pb_delay(s, stage_count);
        return d;
    }();
    /// The layers of stage s, [boundaries[s], boundaries[s + 1]) (s < stage_count, unchecked).
    static constexpr layer_range stage(std::size_t s) noexcept { return {boundaries[s], boundaries[s + 1]}; }
};

/// Stage S of a static layout, as a type: its index, layers [begin, end) and their types
/// (`layers`, a boost::mp11::mp_list sub-list of the network's nodes), delay D_S = 2 (S_count - 1 - S), parameter
/// count, and the range tag its passes are instantiated for (static_range<begin, end>: stage_program.hpp).
template <class Layout, std::size_t S>
struct stage_type {
    static_assert(S < Layout::stage_count, "pipeprop::stage_type: stage index out of range.");
    using layout = Layout;  ///< The layout the stage belongs to (a pipeline_layout).
    using stack_type = typename Layout::stack_type;  ///< The network's layer stack (Layout::stack_type).
    static constexpr std::size_t index = S;  ///< The stage's index S (0 = input side).
    static constexpr std::size_t begin = Layout::boundaries[S];    ///< First layer of the stage (flattened network).
    static constexpr std::size_t end = Layout::boundaries[S + 1];  ///< One past the stage's last layer.
    static constexpr layer_range range{begin, end};  ///< The same range as a layer_range value.
    /// The stage's PB delay D_S = 2 (S_count - 1 - S) (PB paper §3).
    static constexpr std::size_t delay = Layout::delays[S];
    /// The stage's node types, a boost::mp11::mp_list (the network's nodes begin..end).
    using layers = boost::mp11::mp_drop_c<boost::mp11::mp_take_c<typename stack_type::layer_list, end>, begin>;
    /// Elements of the stage's parameter block (the sum over its layers).
    static constexpr std::size_t parameter_count = stack_type::parameter_count_of(range);
    /// The tag the stage's passes are instantiated for, static_range<begin, end> (stage_program.hpp).
    using range_tag = static_range<begin, end>;
};

namespace detail {
template <class Layout>
struct stage_at {
    template <class I>
    using fn = stage_type<Layout, I::value>;
};
}  // namespace detail

/// The stage types of a static layout, in order: boost::mp11::mp_list<stage_type<Layout, 0>, ...>.
template <class Layout>
using stage_types = boost::mp11::mp_transform_q<detail::stage_at<Layout>, boost::mp11::mp_iota_c<Layout::stage_count>>;

/// Runtime partition from split points (e.g. parsed from a command line): returns the stage ranges. Throws
/// std::invalid_argument, naming the offending point, unless the points are strictly increasing inside
/// (0, layer_count). An empty list gives one stage.
[[nodiscard]] inline std::vector<layer_range> partition_at(std::size_t layer_count,
                                                           const std::vector<std::size_t>& split_points) {
    std::vector<layer_range> stages;
    std::size_t begin = 0;
    for (std::size_t i = 0; i < split_points.size(); ++i) {
        const std::size_t p = split_points[i];
        if (p == 0 || p >= layer_count || p <= begin)
            throw std::invalid_argument("pipeprop::partition_at: split point " + std::to_string(i) + " (" +
                                        std::to_string(p) + ") must be greater than the previous one and in (0, " +
                                        std::to_string(layer_count) + ")");
        stages.push_back({begin, p});
        begin = p;
    }
    stages.push_back({begin, layer_count});
    return stages;
}

/// Throws std::invalid_argument, naming the node, when a stage of `stages` starts at a node of Stack where no
/// boundary is allowed (Stack::cut_allowed_before: a projection shortcut's layers and its add share a stage).
/// The one partition check of every engine (PB and synchronous): throws std::invalid_argument unless `stages` cut
/// layers [0, layer_count) into non-empty, contiguous ranges in order (no layer dropped or duplicated:
/// docs/pitfalls.md item 9). The message starts with `who` and names the offending stage.
inline void check_partition(const std::vector<layer_range>& stages, std::size_t layer_count,
                            std::string_view who = "pipeprop") {
    const std::string w(who);
    if (stages.empty()) throw std::invalid_argument(w + ": a pipeline needs at least one stage");
    std::size_t next = 0;
    for (std::size_t s = 0; s < stages.size(); ++s) {
        const layer_range r = stages[s];
        if (r.begin != next || r.end <= r.begin || r.end > layer_count)
            throw std::invalid_argument(w + ": stage " + std::to_string(s) + " covers layers [" +
                                        std::to_string(r.begin) + ", " + std::to_string(r.end) + "), expected a " +
                                        "non-empty range starting at layer " + std::to_string(next) + " within the " +
                                        std::to_string(layer_count) + " layers");
        next = r.end;
    }
    if (next != layer_count)
        throw std::invalid_argument(w + ": the stages end at layer " + std::to_string(next) + " but the network has " +
                                    std::to_string(layer_count) + " layers (layers dropped)");
}

template <class Stack>
void check_cuts_allowed(const std::vector<layer_range>& stages) {
    for (std::size_t s = 0; s < stages.size(); ++s) {
        const std::size_t i = stages[s].begin;
        if (i < Stack::layer_count && !Stack::cut_allowed_before[i])
            throw std::invalid_argument("pipeprop: stage " + std::to_string(s) + " starts at node " +
                                        std::to_string(i) + " (" + std::string(Stack::node_names[i]) +
                                        "), inside a projection shortcut: the shortcut's layers share the stage of "
                                        "the block's add (docs/pb-semantics.md section 6)");
    }
}

/// The stage ranges of a static layout, as a runtime vector (for code shared with runtime partitions).
template <class Layout>
[[nodiscard]] std::vector<layer_range> stage_ranges() {
    std::vector<layer_range> r;
    for (std::size_t s = 0; s < Layout::stage_count; ++s) r.push_back(Layout::stage(s));
    return r;
}

}  // namespace pipeprop
