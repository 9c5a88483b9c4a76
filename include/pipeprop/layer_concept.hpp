// pipeprop/layer_concept.hpp: the layer contract (C++20 concepts) every built-in and user layer satisfies.
//
// Split backward as in 2BP (Rae et al., arXiv 2405.18047, §3) and in ZB (Qi et al., arXiv 2401.10241, "B" / "W"):
// backward-p1 computes the gradient w.r.t. the layer input, backward-p2 the gradient w.r.t. the layer's weights.
//
// A concrete layer L (bound to a value type T and a per-sample input shape) provides:
//
//   using value_type   = T;                       // float for training, double for gradient checks
//   using input_shape  = shape<...>;              // per sample; tensors are [b, input_shape...]
//   using output_shape = shape<...>;              // per sample; tensors are [b, output_shape...]
//   static constexpr std::size_t parameter_count; // elements in the layer's parameter block (0: parameter-free)
//   using stash_type     = ...;                   // what forward keeps per micro-batch for the backward passes
//   using workspace_type = ...;                   // scratch owned by whoever runs the layer, reused across calls
//   stash_type     make_stash(std::size_t max_b) const;      // optional; default-constructed when absent
//   workspace_type make_workspace(std::size_t max_b) const;  // optional; default-constructed when absent
//
//   void forward(std::span<const T> w, const T* x, T* y, std::size_t b, stash_type& st, workspace_type& ws) const;
//     requires: x holds b * input_shape::size values, y room for b * output_shape::size; 1 <= b <= max_b of st, ws.
//     ensures:  y is ASSIGNED (not added to); st holds what the backward passes of this micro-batch need.
//
//   void backward_input(std::span<const T> w, const T* x, const T* y, const T* dy, T* dx, std::size_t b,
//                       const stash_type& st, workspace_type& ws) const;                  // backward-p1
//     requires: forward ran on (w', x, b, st) before; st unchanged since. w may differ from w' (pipelining).
//     ensures:  dx = (dy/dx)^T dy is ASSIGNED; st is not modified; parameters are not touched.
//
//   void backward_weight(std::span<T> dw, const T* x, const T* y, const T* dy, std::size_t b,
//                        const stash_type& st, workspace_type& ws) const;                  // backward-p2
//     present only when parameter_count > 0.
//     requires: as backward_input; may run before or after backward_input of the same micro-batch, or much later
//               (2BP defers it), as long as st, x, y, dy are still alive.
//     ensures:  dw += (dy/dw)^T dy (ADDED, never assigned: a weight used twice accumulates both contributions).
//
//   or, for a layer whose weight gradient depends on its own weights (a gated MLP: dW_gate needs W_down^T dy;
//   attention: dW_q needs the context gradient dy W_o), the weighted form
//   void backward_weight(std::span<const T> w, std::span<T> dw, const T* x, const T* y, const T* dy, std::size_t b,
//                        const stash_type& st, workspace_type& ws) const;                  // backward-p2
//     w: the weights the backward-p1 of the same micro-batch used (PB: the current weights, or the stashed ones
//        under weight stashing; synchronous schedules: the step's weights). Otherwise as above.
//
//   void init_parameters(std::span<T> w, std::uint64_t seed) const;     // present only when parameter_count > 0
//     ensures: w is assigned deterministically from seed alone.
//
//   static constexpr std::array<parameter_tensor, K> parameter_tensors(); // optional names/shapes of the block;
//     when present their sizes must add up to parameter_count.
//
// Every function must work for any micro-batch size b >= 1 and must not allocate on the heap after
// make_stash / make_workspace returned.
//
// Stateful layers (optional; Online Normalization, docs/online-norm.md): a layer with running state that its
// training passes update in micro-batch order declares
//
//   static constexpr std::size_t state_count;     // elements of the layer's running-state block (T values)
//   void init_state(std::span<T> s) const;       // ensures: s is assigned its initial value
//   void forward(w, x, y, b, st, ws, std::span<T> s) const;            // training forward: also updates s
//   void backward_input(w, x, y, dy, dx, b, st, ws, std::span<T> s) const;  // backward-p1: also updates s
//   void infer(w, x, y, b, ws, std::span<const T> s) const;           // evaluation: y ASSIGNED, s unchanged
//   static constexpr std::array<parameter_tensor, K> state_tensors();  // optional names (checkpoints)
//
// instead of the stateless forward / backward_input (backward_weight keeps its signature and never touches s).
// The runner keeps the state block per stage, next to the parameters, checkpoints it, and calls the passes of a
// stage in the order the schedule runs them (PB: forward of the newest micro-batch, then backward of the oldest).
// Evaluation calls infer (or, for a stateless layer, forward with a scratch stash) and changes no state.
//
// A normalization layer (group norm, Online Normalization, RMSNorm) declares `static constexpr bool normalization =
// true;` (optional; false when absent): the weight-layer partition (pipeline_layout.hpp, fine_grained with
// normalization::attach) keeps it in the stage of the conv or dense layer before it.
//
// Tensor shapes are per sample and may have any rank: rank 1 [N] (dense), rank 2 [L, D] (a sequence of L tokens
// of D features: transformer layers), rank 3 [C, H, W] (images). A layer whose input is integer token ids reads
// them as T values holding exact integers (float holds every integer below 2^24) and declares
// `static constexpr bool integer_input = true;`: its backward_input must still assign dx (zeros), and nothing
// upstream of it has parameters.
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

}  // namespace pipeprop
