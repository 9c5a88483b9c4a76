// pipeprop/memory_estimate.hpp: the bytes a pipelined engine will allocate, known before it allocates them.
//
// pb::estimate_memory (pb/memory_estimate.hpp) and sync::estimate_memory (sync/memory_estimate.hpp) fill a
// memory_estimate from an engine's compile-time network type, its stage cut and its options, without building it:
// the same counts the engine's constructor allocates (activation slots per stage, weight copies per stage, boundary
// channel capacities), times the sizes of layer_stack's constexpr tables (activation_size, parameter_offset) and the
// layers' stash and workspace bytes (layer_stack::activation_bytes, layer_stack::workspace_bytes). The figures are
// the payload bytes of the engine's buffers (what the engines' own reports count: pb::stage_stats::stash_bytes and
// weight_bytes, sync::stage::activation_bytes); the allocator's and the containers' few bytes per buffer, the flow
// graph's threads and the caller's data are not in them. Units: bytes. Where they come from: docs/pitfalls.md
// item 11; the buffers: PB-paper (Kosson et al., arXiv 2003.11666) §3, 2BP-paper (Rae et al., arXiv 2405.18047) §3.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace pipeprop {

/// What one stage of a pipelined engine allocates (bytes; see the file comment).
struct stage_memory {
    std::size_t activation_slots = 0;  ///< micro-batches whose activations the stage holds at once
    /// The slots' activations a(k), gradients g(k), layer stashes and int32 targets (PB: pb::stage_stats::stash_bytes;
    /// sync: sync::stage::activation_bytes plus the targets).
    std::size_t activation_bytes = 0;
    /// Weights, gradient, optimizer state and the policy's weight copies (PB: pb::stage_stats::weight_bytes; the
    /// sequential PB executor's forward-weight history and the concurrent one's forward weights and weight stash).
    std::size_t weight_bytes = 0;
    std::size_t workspace_bytes = 0;  ///< the stage's layers' workspaces (one set per stage)
    /// The boundary channels the stage receives on: forward from stage s - 1 (stage 0: the input channel), backward
    /// from stage s + 1.
    std::size_t channel_bytes = 0;
    /// All of the above.
    [[nodiscard]] std::size_t total() const noexcept {
        return activation_bytes + weight_bytes + workspace_bytes + channel_bytes;
    }
};

/// What a pipelined engine allocates (bytes): per stage, plus the evaluation buffers and what only its
/// construction holds.
struct memory_estimate {
    std::vector<stage_memory> stages;  ///< Per stage s, [S] (stages another process runs: zeros).
    /// The evaluation buffers (stage_inference: two activation buffers, stashes and workspaces at the evaluation
    /// micro-batch), allocated by the first evaluate().
    std::size_t evaluation_bytes = 0;
    /// Allocated by the engine once, outside the stages (the sequential PB executor's targets).
    std::size_t other_bytes = 0;
    /// Held during construction only: the network's initial parameter block, freed when the constructor returns.
    std::size_t construction_bytes = 0;

    ///@{
    /// Sums over the stages.
    [[nodiscard]] std::size_t activation_bytes() const noexcept { return sum(&stage_memory::activation_bytes); }
    [[nodiscard]] std::size_t weight_bytes() const noexcept { return sum(&stage_memory::weight_bytes); }
    [[nodiscard]] std::size_t workspace_bytes() const noexcept { return sum(&stage_memory::workspace_bytes); }
    [[nodiscard]] std::size_t channel_bytes() const noexcept { return sum(&stage_memory::channel_bytes); }
    ///@}
    /// What the engine holds once built, before any evaluation: every stage's total plus other_bytes.
    [[nodiscard]] std::size_t built_bytes() const noexcept {
        return activation_bytes() + weight_bytes() + workspace_bytes() + channel_bytes() + other_bytes;
    }
    /// The most the engine holds at once: built_bytes plus the larger of the construction block and the evaluation
    /// buffers (the one is freed before the other is made).
    [[nodiscard]] std::size_t peak_bytes() const noexcept {
        return built_bytes() + std::max(construction_bytes, evaluation_bytes);
    }

private:
    [[nodiscard]] std::size_t sum(std::size_t stage_memory::*field) const noexcept {
        std::size_t n = 0;
        for (const stage_memory& s : stages) n += s.*field;
        return n;
    }
};

}  // namespace pipeprop
