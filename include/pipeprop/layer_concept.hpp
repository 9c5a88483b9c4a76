// pipeprop/layer_concept.hpp: the layer contract (C++20 concepts) every built-in and user layer satisfies.
//
// Split backward as in 2BP (Rae et al., arXiv 2405.18047, §3) and in ZB (Qi et al., arXiv 2401.10241, "B" / "W"):
// backward-p1 computes the gradient w.r.t. the layer input, backward-p2 the gradient w.r.t. the layer's weights.
//
// The members a concrete layer provides are documented once, on pipeprop::layer_contract below (a struct that exists
// for the reference only); the built-in layers' members copy that documentation.
//
// Composite blocks (graph/blocks.hpp: residual<...>, residual_projection<...>) are not layers: the network flattens
// them into nodes that are (graph/nodes.hpp), so every runner sees one flat list of layers.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "pipeprop/optim/momentum_update.hpp"
#include "pipeprop/parameter_tensor.hpp"
#include "pipeprop/shape.hpp"

namespace pipeprop {

/// Stash type for layers that keep nothing besides x and y (which the runner keeps anyway).
struct no_stash {};
/// Workspace type for layers that need no scratch memory.
struct no_workspace {};

namespace detail {
template <class L>
struct stash_of {
    using type = no_stash;
};
template <class L>
    requires requires { typename L::stash_type; }
struct stash_of<L> {
    using type = typename L::stash_type;
};
template <class L>
struct workspace_of {
    using type = no_workspace;
};
template <class L>
    requires requires { typename L::workspace_type; }
struct workspace_of<L> {
    using type = typename L::workspace_type;
};
}  // namespace detail

#ifdef PIPEPROP_DOXYGEN
/// The layer contract, member by member: what pipeprop::layer requires of a concrete layer L bound to a value type T
/// and a per-sample input shape. This struct exists for the reference only (it is not defined when compiling); the
/// built-in layers' members copy its documentation.
///
/// Tensors are row-major [b, shape...]: b is the micro-batch dimension, the shapes are per sample and of any rank:
/// [N] (dense), [L, D] (a sequence of L tokens of D features: transformer layers), [C, H, W] (images). Every pass
/// works for any b >= 1 up to the max_b its stash and workspace were made for, and does not allocate on the heap
/// after make_stash / make_workspace returned. Backward-p1 and backward-p2 are 2BP's split backward (Rae et al.,
/// arXiv 2405.18047, §3).
///
/// Optional declarations: `static constexpr bool normalization = true;` (group norm, Online Normalization, RMSNorm:
/// the weight-layer partition of pipeline_layout.hpp keeps it in the stage of the conv or dense layer before it);
/// `static constexpr bool integer_input = true;` for a layer whose input is integer token ids held exactly as T values
/// (float holds every integer below 2^24): its backward_input still assigns dx (zeros), and nothing upstream of it
/// has parameters.
///
/// Stateful layers (Online Normalization, docs/online-norm.md) declare a running-state block and the passes of
/// stateful_layer_contract instead of the stateless forward / backward_input (backward_weight keeps its signature
/// and never touches the state). A layer whose weight gradient needs its own weights declares backward_weight in the
/// weighted form of weighted_layer_contract. The runner keeps the state per stage next to the parameters,
/// checkpoints it, and runs a stage's passes in schedule order (PB: forward of the newest micro-batch, then backward
/// of the oldest); evaluation calls infer and changes no state.
template <class T>
struct layer_contract {
    /// The arithmetic type: float for training, double for gradient checks.
    using value_type = T;
    /// Per-sample input shape (a pipeprop::shape); input tensors are [b, input_shape...].
    using input_shape = shape<1>;
    /// Per-sample output shape (a pipeprop::shape); output tensors are [b, output_shape...].
    using output_shape = shape<1>;
    /// Elements of the layer's parameter block (0: parameter-free); its layout is given by parameter_tensors().
    static constexpr std::size_t parameter_count = 0;
    /// What forward keeps per micro-batch for the backward passes of that micro-batch (no_stash when nothing).
    using stash_type = no_stash;
    /// Scratch owned by whoever runs the layer, reused across calls and micro-batches (no_workspace when none).
    using workspace_type = no_workspace;
    /// Optional: names and shapes of the tensors of the parameter block, in order; their sizes add up to
    /// parameter_count (checkpoints and parameter reports use them).
    static constexpr std::array<parameter_tensor, 1> parameter_tensors();
    /// Optional: the stash for micro-batches of up to max_b samples (setup time; may allocate). Default-constructed
    /// when absent.
    stash_type make_stash(std::size_t max_b) const;
    /// Optional: the workspace for micro-batches of up to max_b samples (setup time; may allocate).
    /// Default-constructed when absent.
    workspace_type make_workspace(std::size_t max_b) const;
    /// Optional: bytes the stash st holds (the memory reports of the pipeline; sizeof(stash_type) when absent).
    /// The memory estimates (memory_estimate.hpp) take a stash of max_b samples to hold a fixed part and a part
    /// per sample (pipeprop::stash_bytes_for).
    std::size_t stash_bytes(const stash_type& st) const noexcept;
    /// Optional: bytes the workspace ws holds (sizeof(workspace_type) when absent); like stash_bytes, a fixed part
    /// and a part per sample of its max_b.
    std::size_t workspace_bytes(const workspace_type& ws) const noexcept;
    /// Assigns the parameters w [parameter_count] deterministically from seed alone (present when parameter_count > 0).
    void init_parameters(std::span<T> w, std::uint64_t seed) const;
    /// Forward of one micro-batch: y [b, output_shape] is ASSIGNED (not added to) from x [b, input_shape] and the
    /// weights w [parameter_count]; st receives what the backward passes of this micro-batch need.
    /// Requires 1 <= b <= the max_b of st and ws.
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type& st, workspace_type& ws) const;
    /// Backward-p1 (2BP's input gradient, ZB's "B"): dx [b, input_shape] = (dy/dx)^T dy is ASSIGNED from
    /// dy [b, output_shape]. Requires that forward ran on (w', x, b, st) before and st is unchanged since; w may differ
    /// from w' (pipelining: the weights changed between the forward and the backward of this micro-batch). Modifies
    /// neither st nor the parameters.
    void backward_input(std::span<const T> w, const T* x, const T* y, const T* dy, T* dx, std::size_t b,
                        const stash_type& st, workspace_type& ws) const;
    /// Backward-p2 (2BP's weight gradient, ZB's "W"), present when parameter_count > 0: dw [parameter_count] +=
    /// (dy/dw)^T dy, ADDED (never assigned: a weight used twice accumulates both contributions). May run before or
    /// after backward_input of the same micro-batch, or much later (2BP defers it), while st, x, y, dy are alive.
    void backward_weight(std::span<T> dw, const T* x, const T* y, const T* dy, std::size_t b, const stash_type& st,
                         workspace_type& ws) const;
};

/// The weighted form of backward-p2 (layer_contract::backward_weight otherwise), for the reference only.
template <class T>
struct weighted_layer_contract : layer_contract<T> {
    /// Backward-p2 in the weighted form, for a layer whose weight gradient depends on its own weights (a gated MLP:
    /// dW_gate needs W_down^T dy; attention: dW_q needs dy W_o): dw [parameter_count] += (dy/dw)^T dy, ADDED.
    /// w: the weights backward-p1 of the same micro-batch used (PB: the current weights, or the stashed ones under
    /// weight stashing; synchronous schedules: the step's weights). Otherwise as layer_contract::backward_weight.
    void backward_weight(std::span<const T> w, std::span<T> dw, const T* x, const T* y, const T* dy, std::size_t b,
                         const stash_type& st, workspace_type& ws) const;
};

/// The members of a stateful layer (Online Normalization), for the reference only: they replace the stateless
/// forward / backward_input of layer_contract (see there).
template <class T>
struct stateful_layer_contract : layer_contract<T> {
    /// Elements of the running-state block (T values), kept per stage next to the parameters and checkpointed.
    static constexpr std::size_t state_count = 1;
    /// Assigns the state block s [state_count] its initial value.
    void init_state(std::span<T> s) const;
    /// The training forward (as layer_contract::forward) that also updates the running state s in micro-batch order.
    void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type& st, workspace_type& ws,
                 std::span<T> s) const;
    /// Backward-p1 (as layer_contract::backward_input) that also updates the running state s.
    void backward_input(std::span<const T> w, const T* x, const T* y, const T* dy, T* dx, std::size_t b,
                        const stash_type& st, workspace_type& ws, std::span<T> s) const;
    /// Evaluation: y [b, output_shape] ASSIGNED from x [b, input_shape] with the state s read only (no stash).
    void infer(std::span<const T> w, const T* x, T* y, std::size_t b, workspace_type& ws, std::span<const T> s) const;
    /// Optional: names and shapes of the tensors of the state block (checkpoints).
    static constexpr std::array<parameter_tensor, 1> state_tensors();
};

/// The spec form of a layer in a network list (pipeprop::dense<Out>, ...): `bind<T, InputShape>` is the concrete
/// layer for value type T and per-sample input shape InputShape. For the reference only, like layer_contract.
struct layer_spec_contract {
    /// The concrete layer (satisfying pipeprop::layer) for value type T and per-sample input shape InputShape.
    template <class T, class InputShape>
    using bind = layer_contract<T>;
};
#endif

/// The stash type of layer L (L::stash_type, or no_stash when L declares none).
template <class L>
using stash_t = typename detail::stash_of<L>::type;
/// The workspace type of layer L (L::workspace_type, or no_workspace when L declares none).
template <class L>
using workspace_t = typename detail::workspace_of<L>::type;

/// Sub-concept: value type and per-sample shapes fixed in the type.
template <class L>
concept layer_has_shapes = requires {
    typename L::value_type;
    typename L::input_shape;
    typename L::output_shape;
} && std::is_floating_point_v<typename L::value_type> && shape_type<typename L::input_shape> &&
                           shape_type<typename L::output_shape>;

/// Sub-concept: the number of parameters is a compile-time constant.
template <class L>
concept layer_has_parameter_count = requires {
    { L::parameter_count } -> std::convertible_to<std::size_t>;
    std::integral_constant<std::size_t, L::parameter_count>{};
};

/// Sub-concept: forward with the documented signature.
template <class L>
concept layer_has_forward = requires(const L& l, std::span<const typename L::value_type> w,
                                     const typename L::value_type* x, typename L::value_type* y, std::size_t b,
                                     stash_t<L>& st, workspace_t<L>& ws) {
    { l.forward(w, x, y, b, st, ws) } -> std::same_as<void>;
};

/// Sub-concept: backward-p1 (input gradient) with the documented signature; the stash is read-only.
template <class L>
concept layer_has_backward_input =
    requires(const L& l, std::span<const typename L::value_type> w, const typename L::value_type* x,
             const typename L::value_type* y, const typename L::value_type* dy, typename L::value_type* dx,
             std::size_t b, const stash_t<L>& st, workspace_t<L>& ws) {
        { l.backward_input(w, x, y, dy, dx, b, st, ws) } -> std::same_as<void>;
    };

/// Sub-concept: backward-p2 (weight gradient, accumulating) with the documented signature.
template <class L>
concept layer_has_backward_weight =
    requires(const L& l, std::span<typename L::value_type> dw, const typename L::value_type* x,
             const typename L::value_type* y, const typename L::value_type* dy, std::size_t b,
             const stash_t<L>& st, workspace_t<L>& ws) {
        { l.backward_weight(dw, x, y, dy, b, st, ws) } -> std::same_as<void>;
    };

/// Sub-concept: backward-p2 in the weighted form (it also receives the layer's weights).
template <class L>
concept layer_has_weighted_backward_weight =
    requires(const L& l, std::span<const typename L::value_type> w, std::span<typename L::value_type> dw,
             const typename L::value_type* x, const typename L::value_type* y, const typename L::value_type* dy,
             std::size_t b, const stash_t<L>& st, workspace_t<L>& ws) {
        { l.backward_weight(w, dw, x, y, dy, b, st, ws) } -> std::same_as<void>;
    };

/// Calls backward-p2 of layer l in whichever form it declares (weighted or not): dw += (dy/dw)^T dy.
template <class L, class T>
void call_backward_weight(const L& l, std::span<const T> w, std::span<T> dw, const T* x, const T* y, const T* dy,
                          std::size_t b, const stash_t<L>& st, workspace_t<L>& ws) {
    if constexpr (layer_has_weighted_backward_weight<L>)
        l.backward_weight(w, dw, x, y, dy, b, st, ws);
    else
        l.backward_weight(dw, x, y, dy, b, st, ws);
}

/// Optional: backward-p2 of one sample fused into the momentum update (dense_layer):
/// l.backward_weight_momentum_update(w, v, x, dy, c) updates the layer's weights w [P] and velocity v [P] in place
/// as optim::momentum_update with coefficients c would after backward_weight at b = 1 into a zeroed gradient, bit
/// for bit, without storing that gradient. layer_stack::backward_momentum_update uses it at b = 1.
template <class L>
concept layer_has_fused_momentum_update =
    requires(const L& l, std::span<typename L::value_type> w, std::span<typename L::value_type> v,
             const typename L::value_type* x, const typename L::value_type* dy,
             const optim::update_coefficients<typename L::value_type>& c) {
        { l.backward_weight_momentum_update(w, v, x, dy, c) } -> std::same_as<void>;
    };

/// Sub-concept: deterministic, seeded parameter initialization.
template <class L>
concept layer_has_init = requires(const L& l, std::span<typename L::value_type> w, std::uint64_t seed) {
    { l.init_parameters(w, seed) } -> std::same_as<void>;
};

/// Sub-concept: the layer declares a running-state block (state_count > 0; see the file comment).
template <class L>
concept layer_declares_state = requires {
    { L::state_count } -> std::convertible_to<std::size_t>;
    std::integral_constant<std::size_t, L::state_count>{};
} && (L::state_count > 0);

/// Sub-concept: the passes of a stateful layer (training forward and backward-p1 take the state block, infer and
/// init_state exist) with the documented signatures.
template <class L>
concept layer_has_state_passes =
    requires(const L& l, std::span<const typename L::value_type> w, const typename L::value_type* x,
             typename L::value_type* y, const typename L::value_type* dy, typename L::value_type* dx, std::size_t b,
             stash_t<L>& st, const stash_t<L>& cst, workspace_t<L>& ws, std::span<typename L::value_type> s,
             std::span<const typename L::value_type> cs) {
        { l.forward(w, x, y, b, st, ws, s) } -> std::same_as<void>;
        { l.backward_input(w, x, y, dy, dx, b, cst, ws, s) } -> std::same_as<void>;
        { l.infer(w, x, y, b, ws, cs) } -> std::same_as<void>;
        { l.init_state(s) } -> std::same_as<void>;
    };

/// Elements of layer L's running-state block: L::state_count, or 0 for a stateless layer.
template <class L>
inline constexpr std::size_t state_count_v = [] {
    if constexpr (layer_declares_state<L>)
        return static_cast<std::size_t>(L::state_count);
    else
        return std::size_t{0};
}();

/// True when layer L declares itself a normalization layer (`static constexpr bool normalization = true;`).
template <class L>
inline constexpr bool is_normalization_layer = [] {
    if constexpr (requires { L::normalization; })
        return static_cast<bool>(L::normalization);
    else
        return false;
}();

/// A layer: shapes and parameter count; the stateless passes, or the stateful ones when it declares a state block;
/// backward-p2 and init required exactly when the layer has parameters.
template <class L>
concept layer = layer_has_shapes<L> && layer_has_parameter_count<L> &&
                (layer_declares_state<L> ? layer_has_state_passes<L>
                                         : (layer_has_forward<L> && layer_has_backward_input<L>)) &&
                (L::parameter_count == 0 ||
                 ((layer_has_backward_weight<L> || layer_has_weighted_backward_weight<L>) && layer_has_init<L>));

/// Make the stash of a layer for micro-batches of up to max_b samples (setup time; may allocate).
template <class L>
[[nodiscard]] stash_t<L> make_stash(const L& l, std::size_t max_b) {
    if constexpr (requires { l.make_stash(max_b); })
        return l.make_stash(max_b);
    else
        return stash_t<L>{};
}

/// Make the workspace of a layer for micro-batches of up to max_b samples (setup time; may allocate).
template <class L>
[[nodiscard]] workspace_t<L> make_workspace(const L& l, std::size_t max_b) {
    if constexpr (requires { l.make_workspace(max_b); })
        return l.make_workspace(max_b);
    else
        return workspace_t<L>{};
}

/// Bytes held by one stash of layer L made for max_b samples (L::stash_bytes(max_b) when provided, else sizeof).
template <class L>
[[nodiscard]] std::size_t stash_bytes(const L& l, const stash_t<L>& st) {
    if constexpr (requires { l.stash_bytes(st); })
        return l.stash_bytes(st);
    else
        return sizeof(stash_t<L>);
}

/// Bytes held by the workspace ws of layer L (L::workspace_bytes(ws) when provided, else sizeof).
template <class L>
[[nodiscard]] std::size_t workspace_bytes(const L& l, const workspace_t<L>& ws) {
    if constexpr (requires { l.workspace_bytes(ws); })
        return l.workspace_bytes(ws);
    else
        return sizeof(workspace_t<L>);
}

namespace detail {
/// f(1) + (max_b - 1) (f(2) - f(1)): bytes of a buffer with a fixed part and a part per sample, for max_b samples.
template <class F>
[[nodiscard]] std::size_t affine_in_samples(std::size_t max_b, F f) {
    const std::size_t one = f(1);
    if (max_b <= 1) return one;
    const std::size_t two = f(2);
    return one + (max_b - 1) * (two > one ? two - one : 0);
}
}  // namespace detail

/// Bytes a stash of layer L made for max_b samples holds, measured on stashes of 1 and 2 samples (a fixed part and
/// a part per sample: every built-in layer's stash) instead of making the large one: for memory estimates.
template <class L>
[[nodiscard]] std::size_t stash_bytes_for(const L& l, std::size_t max_b) {
    return detail::affine_in_samples(max_b, [&](std::size_t b) { return stash_bytes(l, make_stash(l, b)); });
}

/// Bytes a workspace of layer L made for max_b samples holds, measured like stash_bytes_for.
template <class L>
[[nodiscard]] std::size_t workspace_bytes_for(const L& l, std::size_t max_b) {
    return detail::affine_in_samples(max_b, [&](std::size_t b) { return workspace_bytes(l, make_workspace(l, b)); });
}

}  // namespace pipeprop
