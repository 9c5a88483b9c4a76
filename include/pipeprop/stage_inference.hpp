// pipeprop/stage_inference.hpp: inference through a pipeline's stages one after the other, for evaluation
// (pipeprop/evaluation.hpp) by the pipelined engines (pb::engine, sync::schedule_executor): each stage runs its own
// program's infer with its own weights and running state. The stages share two activation buffers
// (layer_stack::make_inference_activations): a stage's output is the next stage's input in place, and the memory is
// that of the network's largest activation at max_b samples, twice, whatever the number of stages. No allocation
// after construction. evaluate_stages: one evaluation through the stages, the same code for both engines.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "pipeprop/evaluation.hpp"
#include "pipeprop/layer_stack.hpp"
#include "pipeprop/network_blocks.hpp"

namespace pipeprop {

/// Activation and workspace buffers for inference of micro-batches of up to max_b samples through stages `ranges`.
template <class Stack>
class stage_inference {
public:
    using value_type = typename Stack::value_type;  ///< The stack's value type.

    /// Throws std::invalid_argument (from Stack) for an invalid range or max_b == 0.
    stage_inference(const Stack& stack, const std::vector<layer_range>& ranges, std::size_t max_b) : max_b_(max_b) {
        activations_.assign(2 * Stack::inference_stride(max_b), value_type(0));
        for (const layer_range r : ranges)
            buffers_.push_back({stack.make_inference_activations(r, max_b, activations_.data()),
                                stack.make_workspaces(r, max_b)});
    }

    [[nodiscard]] std::size_t max_batch() const noexcept { return max_b_; }  ///< Largest micro-batch the buffers take.

    /// Bytes the buffers hold: the two shared activation buffers, every stage's stashes and workspaces.
    [[nodiscard]] std::size_t bytes() const noexcept {
        std::size_t n = activations_.size() * sizeof(value_type);
        for (const buffers& b : buffers_) n += b.act.bytes() + b.ws.bytes();
        return n;
    }
    /// What bytes() of stage_inference(stack, ranges, max_b) will be, computed without allocating it
    /// (layer_stack::activation_bytes and workspace_bytes; memory_estimate.hpp). Throws as the constructor.
    [[nodiscard]] static std::size_t bytes_for(const Stack& stack, const std::vector<layer_range>& ranges,
                                               std::size_t max_b) {
        std::size_t n = 2 * Stack::inference_stride(max_b) * sizeof(value_type);
        for (const layer_range r : ranges)
            n += stack.activation_bytes(r, max_b, false, true) + stack.workspace_bytes(r, max_b);
        return n;
    }

    /// Runs x [b, input size] (b <= max_batch()) through every stage: infer_stage(s, act, b, ws) runs stage s's
    /// inference on its buffers (act.input() holds its input). Returns the last stage's output [b, output size],
    /// valid until the next call.
    template <class InferStage>
    const value_type* run(const value_type* x, std::size_t b, InferStage&& infer_stage) {
        std::copy_n(x, b * buffers_.front().act.input_size(), buffers_.front().act.input());
        for (std::size_t s = 0; s < buffers_.size(); ++s) infer_stage(s, buffers_[s].act, b, buffers_[s].ws);
        return buffers_.back().act.output();
    }

private:
    struct buffers {
        typename Stack::activations act;
        typename Stack::workspaces ws;
    };
    std::size_t max_b_;
    aligned_vector<value_type> activations_;  // the two buffers every stage's a(k) alternate between
    std::vector<buffers> buffers_;
};

/// Mean loss and accuracy over n samples x [n, input size], targets [n, Loss::targets_per_sample], run through
/// `stages` (each with program() and state(), or a pointer to one) on the weights weights(stage) in chunks of
/// inference.max_batch() (evaluate_in_chunks: throws as it does, its messages starting with `who`). Running state is
/// read, never updated.
template <loss_policy Loss, class Stack, class Stages, class Weights>
[[nodiscard]] evaluation evaluate_stages(stage_inference<Stack>& inference, const Stack& stack, Stages& stages,
                                         Weights weights, const typename Stack::value_type* x,
                                         const std::int32_t* labels, std::size_t n, const char* who) {
    return evaluate_in_chunks<Loss>(
        labels, n, inference.max_batch(),
        [&](std::size_t first, std::size_t b) {
            return inference.run(x + first * Stack::activation_size[0], b,
                                 [&](std::size_t s, auto& act, std::size_t bb, auto& ws) {
                                     auto& st = detail::stage_of(stages[s]);
                                     st.program().infer(stack, weights(st), act, bb, ws, st.state());
                                 });
        },
        who);
}

}  // namespace pipeprop
