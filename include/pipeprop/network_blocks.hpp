// pipeprop/network_blocks.hpp: whole-network blocks from the slices the stages of a pipeline hold, and back. One
// definition for every engine (pb::engine and its checkpoints, sync::schedule_executor): a per-parameter buffer
// (weights, gradient, an optimizer's state) in the network's block layout [Stack::parameter_count] (layers in order,
// layer_stack::parameter_offset), the running state of stateful layers in [Stack::state_count]
// (layer_stack::state_offset). A stage is any object (or pointer to one) with range() (its layer_range); the field
// functions map a stage to its slice (a span of parameter_count_of(range) or state_count_of(range) elements).
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>

namespace pipeprop {

namespace detail {
/// The stage behind x (x itself, or *x for a pointer or smart pointer).
template <class X>
decltype(auto) stage_of(X& x) {
    if constexpr (requires { x.range(); })
        return (x);
    else
        return (*x);
}
inline void check_block_size(std::size_t got, std::size_t want, const char* who, const char* what) {
    if (got != want)
        throw std::invalid_argument(std::string(who) + ": the " + what + " block has " + std::to_string(got) +
                                    " elements, the network has " + std::to_string(want));
}
}  // namespace detail

/// Writes field(stage) of every stage into out [Stack::parameter_count] at the offset of the stage's first layer.
/// Throws std::invalid_argument naming `who` when out has another size. No allocation.
template <class Stack, class T, class Stages, class Field>
void gather_network_block(const Stages& stages, std::span<T> out, Field field, const char* who) {
    detail::check_block_size(out.size(), Stack::parameter_count, who, "parameter");
    for (const auto& x : stages) {
        const auto& st = detail::stage_of(x);
        const auto part = field(st);
        std::copy(part.begin(), part.end(),
                  out.begin() + static_cast<std::ptrdiff_t>(Stack::parameter_offset[st.range().begin]));
    }
}

/// The reverse: field(stage) of every stage is overwritten from its slice of src [Stack::parameter_count]. Throws
/// std::invalid_argument naming `who` (before anything changes) when src has another size.
template <class Stack, class T, class Stages, class Field>
void scatter_network_block(std::span<const T> src, Stages& stages, Field field, const char* who) {
    detail::check_block_size(src.size(), Stack::parameter_count, who, "parameter");
    for (auto& x : stages) {
        auto& st = detail::stage_of(x);
        const auto part = field(st);
        std::copy_n(src.begin() + static_cast<std::ptrdiff_t>(Stack::parameter_offset[st.range().begin]), part.size(),
                    part.begin());
    }
}

/// Writes every stage's running state (stage.state()) into out [Stack::state_count]. Throws as gather_network_block.
template <class Stack, class T, class Stages>
void gather_network_state(const Stages& stages, std::span<T> out, const char* who) {
    detail::check_block_size(out.size(), Stack::state_count, who, "running-state");
    for (const auto& x : stages) {
        const auto& st = detail::stage_of(x);
        std::copy(st.state().begin(), st.state().end(),
                  out.begin() + static_cast<std::ptrdiff_t>(Stack::state_offset[st.range().begin]));
    }
}

/// The reverse of gather_network_state. Throws as scatter_network_block.
template <class Stack, class T, class Stages>
void scatter_network_state(std::span<const T> src, Stages& stages, const char* who) {
    detail::check_block_size(src.size(), Stack::state_count, who, "running-state");
    for (auto& x : stages) {
        auto& st = detail::stage_of(x);
        std::copy_n(src.begin() + static_cast<std::ptrdiff_t>(Stack::state_offset[st.range().begin]),
                    st.state().size(), st.state().begin());
    }
}

/// Overwrites, for every stage s where pick(s) holds, field(stage) from its slice of parameters
/// [Stack::parameter_count] and the stage's running state from its slice of state [Stack::state_count] (e.g. the
/// stages another process runs, from blocks gathered there). The caller checks the sizes. No allocation.
template <class Stack, class T, class Stages, class Field, class Pick>
void scatter_stage_slices(std::span<const T> parameters, std::span<const T> state, Stages& stages, Field field,
                          Pick pick) {
    for (std::size_t s = 0; s < stages.size(); ++s) {
        if (!pick(s)) continue;
        auto& st = detail::stage_of(stages[s]);
        const auto w = field(st);
        const auto r = st.state();
        std::copy_n(parameters.begin() + static_cast<std::ptrdiff_t>(Stack::parameter_offset[st.range().begin]),
                    w.size(), w.begin());
        std::copy_n(state.begin() + static_cast<std::ptrdiff_t>(Stack::state_offset[st.range().begin]), r.size(),
                    r.begin());
    }
}

}  // namespace pipeprop
