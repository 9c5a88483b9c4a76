// pipeprop/stage_program.hpp: the code of one pipeline stage, as function pointers the executors call.
//
// A stage's passes (forward, infer, backward-p1, backward-p2, fused backward, fused backward with the momentum update
// at b = 1) over its layers. For a static pipeline the stage type (stage_type<Layout, S>, pipeline_layout.hpp) fixes
// the layers [B, E) at compile time and static_stage_programs<Layout>() makes each stage's program from the layout's
// constant boundaries; the dynamic variant (a cut chosen at run time, e.g. the main program's --stages 2,5,8) runs
// over a runtime range (dynamic_stage_programs). Both run the same layer code, generated once per layer type
// (layer_stack.hpp), so a stage adds only its small program and no copy of its layers' code; results are the same
// bits either way. A program runs on the network-free base of the stack (runtime_layer_stack<T>), so its passes are
// compiled once per value type and range kind, and stage_program<layer_stack<Net, T>> is one type for every network
// (basic_stage_program<T>).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "pipeprop/layer_stack.hpp"
#include "pipeprop/pipeline_layout.hpp"

namespace pipeprop {

/// The passes of one stage over layers `range` of a network with value type T (function pointers; see the file
/// comment). Arguments as the layer_stack member functions of the same name; `stack` is the network's layer_stack
/// (seen as its runtime_layer_stack<T> base).
template <class T>
struct basic_stage_program {
    using Stack = runtime_layer_stack<T>;  ///< The stack the passes run on.
    using activations = typename Stack::activations;  ///< The stack's per-micro-batch buffers (stack_activations).
    using workspaces = typename Stack::workspaces;  ///< The stack's per-runner scratch (stack_workspaces).

    /// Not an aggregate (a user-declared constructor), so that a braced layer range {b, e} never converts to a
    /// program: constructors that take ranges or programs stay unambiguous.
    basic_stage_program() = default;

    layer_range range{};  ///< The stage's layers [begin, end).
    bool static_code = false;  ///< the range is a static pipeline's stage (a stage type's constant expressions)
    /// layer_stack::forward over range: the activations' input [b, ...] to their output; updates the running state.
    void (*forward)(const Stack& stack, std::span<const T> w, activations& act, std::size_t b, workspaces& ws,
                    std::span<T> state) = nullptr;
    /// layer_stack::infer over range: evaluation forward with the running state read only.
    void (*infer)(const Stack& stack, std::span<const T> w, activations& act, std::size_t b, workspaces& ws,
                  std::span<const T> state) = nullptr;
    /// layer_stack::backward_input over range (backward-p1, 2BP): from the output gradient in act; the range's input
    /// gradient only when input_gradient_needed.
    void (*backward_input)(const Stack& stack, std::span<const T> w, activations& act, std::size_t b,
                           workspaces& ws, bool input_gradient_needed, std::span<T> state) = nullptr;
    /// layer_stack::backward_weight over range (backward-p2, 2BP): adds the weight gradient into dw [P].
    void (*backward_weight)(const Stack& stack, std::span<const T> w, std::span<T> dw, const activations& act,
                            std::size_t b, workspaces& ws) = nullptr;
    /// layer_stack::backward over range: backward-p1 and backward-p2 of each layer in one pass (no split).
    void (*backward)(const Stack& stack, std::span<const T> w, std::span<T> dw, activations& act, std::size_t b,
                     workspaces& ws, bool input_gradient_needed, std::span<T> state) = nullptr;
    /// layer_stack::backward_momentum_update over range (b = 1): backward with the momentum update fused into
    /// backward-p2 where a layer supports it (w, v [P] updated in place with c; wb: the weights backward-p1 uses).
    void (*backward_momentum_update)(const Stack& stack, std::span<const T> wb, std::span<T> dw, std::span<T> w,
                                     std::span<T> v, const optim::update_coefficients<T>& c, activations& act,
                                     workspaces& ws, bool input_gradient_needed, std::span<T> state) = nullptr;
};

/// The program of the stages of layer_stack Stack: basic_stage_program of its value type, one type for every network.
template <class Stack>
using stage_program = basic_stage_program<typename Stack::value_type>;

namespace detail {
template <class T, class Range>
[[nodiscard]] basic_stage_program<T> make_stage_program(layer_range range) {
    using Stack = runtime_layer_stack<T>;
    using act_t = typename Stack::activations;
    using ws_t = typename Stack::workspaces;
    basic_stage_program<T> p;
    p.range = range;
    p.static_code = !std::is_same_v<Range, dynamic_range>;
    p.forward = [](const Stack& s, std::span<const T> w, act_t& a, std::size_t b, ws_t& ws, std::span<T> st) {
        s.forward(w, a, b, ws, st, Range{});
    };
    p.infer = [](const Stack& s, std::span<const T> w, act_t& a, std::size_t b, ws_t& ws, std::span<const T> st) {
        s.infer(w, a, b, ws, st, Range{});
    };
    p.backward_input = [](const Stack& s, std::span<const T> w, act_t& a, std::size_t b, ws_t& ws, bool need,
                          std::span<T> st) { s.backward_input(w, a, b, ws, need, st, Range{}); };
    p.backward_weight = [](const Stack& s, std::span<const T> w, std::span<T> dw, const act_t& a, std::size_t b,
                           ws_t& ws) { s.backward_weight(w, dw, a, b, ws, Range{}); };
    p.backward = [](const Stack& s, std::span<const T> w, std::span<T> dw, act_t& a, std::size_t b, ws_t& ws,
                    bool need, std::span<T> st) { s.backward(w, dw, a, b, ws, need, st, Range{}); };
    p.backward_momentum_update = [](const Stack& s, std::span<const T> wb, std::span<T> dw, std::span<T> w,
                                    std::span<T> v, const optim::update_coefficients<T>& c, act_t& a, ws_t& ws,
                                    bool need, std::span<T> st) {
        s.backward_momentum_update(wb, dw, w, v, c, a, ws, need, st, false, Range{});
    };
    return p;
}
}  // namespace detail

/// The program of a stage of layer_stack Stack over `range`, its passes instantiated for Range (dynamic_range or
/// static_range<B, E>) and Stack's value type only.
template <class Stack, class Range>
[[nodiscard]] stage_program<Stack> make_stage_program(layer_range range) {
    return detail::make_stage_program<typename Stack::value_type, Range>(range);
}

/// Programs of stages cut at run time (the dynamic variant).
template <class Stack>
[[nodiscard]] std::vector<stage_program<Stack>> dynamic_stage_programs(const std::vector<layer_range>& ranges) {
    std::vector<stage_program<Stack>> out;
    for (const layer_range& r : ranges) out.push_back(make_stage_program<Stack, dynamic_range>(r));
    return out;
}

/// Programs of the stages of a static Layout (pipeline_layout<Net, Partition, T>): stage s over its layers
/// [boundaries[s], boundaries[s + 1]), the constant expressions of the layout. The passes are the same code as the
/// dynamic variant's (the layer code is generated per layer type), so a stage adds no code; static_code marks them.
template <class Layout>
[[nodiscard]] std::vector<stage_program<typename Layout::stack_type>> static_stage_programs() {
    using Stack = typename Layout::stack_type;
    std::vector<stage_program<Stack>> out;
    for (std::size_t s = 0; s < Layout::stage_count; ++s) {
        out.push_back(make_stage_program<Stack, dynamic_range>(Layout::stage(s)));
        out.back().static_code = true;
    }
    return out;
}

/// The ranges of a list of programs.
template <class T>
[[nodiscard]] std::vector<layer_range> ranges_of(const std::vector<basic_stage_program<T>>& programs) {
    std::vector<layer_range> r;
    for (const auto& p : programs) r.push_back(p.range);
    return r;
}

}  // namespace pipeprop
