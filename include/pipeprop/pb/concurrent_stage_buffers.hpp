// pipeprop/pb/concurrent_stage_buffers.hpp: what the concurrent PB executor (pb/concurrent_executor.hpp) keeps per
// stage: D_s + 1 activation slots (micro-batch n in slot n mod (D_s + 1), each with its layers' inputs, stashes and
// targets; the stage's input and output boundary tensors are in the forward channels, pb/forward_channel.hpp, and bound
// to the slot by F), the workspaces, the LWP forward weights and the weight stash, the stage's op stream and the rings
// of messages that arrived for it (docs/pb-semantics.md §1; PB-paper, Kosson et al., arXiv 2003.11666, §3; the bounds:
// docs/pb-semantics.md §9). Allocated once, when the executor is built: nothing grows with the number of micro-batches.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "pipeprop/boundary_channel.hpp"
#include "pipeprop/layer_stack.hpp"
#include "pipeprop/pb/buffer_counts.hpp"
#include "pipeprop/pb/micro_batch.hpp"
#include "pipeprop/pb/op_stream.hpp"

namespace pipeprop::pb::detail {

/// One micro-batch's place in a stage: the buffers of the stage's layer range and the targets.
template <class Stack, class T>
struct concurrent_slot {
    typename Stack::activations act;    // one micro-batch's buffers of the stage's range
    std::vector<std::int32_t> labels;   // [max_b, targets_per_sample]
    micro_batch_info<T> info{};
    std::size_t forward_version = 0;  // stage updates when its forward ran
};

/// A message that arrived for a stage and waits for its op.
struct received_message {
    boundary_message header{};
    bool present = false;
};

/// What the last stage found for a micro-batch (read by stage 0 when the micro-batch completes).
template <class T>
struct loss_result {
    T loss = T(0);
    std::size_t correct = 0;
    std::size_t targets = 0;
};

/// Everything the executor keeps per stage; cache-line aligned, so that stages of different lanes (cores) never
/// write to one line.
template <class Stack, class T>
struct alignas(64) concurrent_stage_buffers {
    std::vector<concurrent_slot<Stack, T>> slots;  // D_s + 1, micro-batch n in slot n mod (D_s + 1)
    typename Stack::workspaces ws;
    aligned_vector<T> forward_weights;  // [P] LWP prediction of the current state (predicting stages only)
    aligned_vector<T> stash;            // [D_s + 1, P] stashed forward weights (weight stashing, D_s > 0)
    op_stream stream;
    std::vector<received_message> forward_in;   // by micro-batch id mod its size (the incoming channel's capacity)
    std::vector<received_message> backward_in;  // likewise
    std::size_t in_flight = 0;
    std::size_t in_flight_max = 0;
    std::chrono::steady_clock::duration busy{};
};

/// The buffers of stage `st` (a pb::stage_state) that this process runs, for up to max_b samples of
/// targets_per_sample targets; `last`: the pipeline's last stage; stash_copies: the weight stash's copies of the
/// stage's weights (pb::weight_stash_copies; 0: no stash). Counts: pb/buffer_counts.hpp. The slots leave out the
/// boundaries of slot_boundaries(first, last): every stage's but the first's input and the last's output.
/// One set of gradient buffers per stage: the stage runs one BW at a time and sends its input gradient out before the
/// next, so slots 1 .. D_s hold only activations and stashes. Not the last stage: its F writes the loss gradient of
/// its micro-batch (it has D = 0 in PB's layout: one slot anyway). The message rings are the caller's.
template <class Stack, class T, class Stage>
void allocate_stage_buffers(concurrent_stage_buffers<Stack, T>& p, const Stack& stack, const Stage& st, bool first,
                            bool last, std::size_t max_b, std::size_t targets_per_sample, std::size_t stash_copies) {
    p.slots.resize(activation_slot_count(st.delay()));
    const std::size_t own_gradients = gradient_set_count(st.delay(), last);  // slots 0 .. own_gradients - 1
    for (std::size_t k = 0; k < p.slots.size(); ++k) {
        concurrent_slot<Stack, T>& sl = p.slots[k];
        sl.act = k < own_gradients ? stack.make_activations(st.range(), max_b, slot_boundaries(first, last))
                                   : stack.make_activations_sharing_gradients(p.slots[0].act);
        sl.labels.assign(max_b * targets_per_sample, 0);
    }
    p.ws = stack.make_workspaces(st.range(), max_b);
    if (st.predicted_forward()) p.forward_weights.assign(st.parameter_count(), T(0));
    if (stash_copies > 0) p.stash.assign(stash_copies * st.parameter_count(), T(0));
    p.stream = op_stream(st.delay());
}

/// out[s] := stage s's busy time so far in seconds (the time its ops ran), for every stage of `per`; returns out
/// ([S]).
template <class Stack, class T>
const std::vector<double>& busy_seconds(const std::vector<std::unique_ptr<concurrent_stage_buffers<Stack, T>>>& per,
                                        std::vector<double>& out) {
    out.resize(per.size());
    for (std::size_t s = 0; s < per.size(); ++s) out[s] = std::chrono::duration<double>(per[s]->busy).count();
    return out;
}

/// Whether micro-batch id's message is in the ring.
inline bool arrived(const std::vector<received_message>& ring, std::size_t id) noexcept {
    const received_message& r = ring[id % ring.size()];
    return r.present && r.header.micro_batch == id;
}
/// Takes micro-batch id's message out of the ring.
inline boundary_message take(std::vector<received_message>& ring, std::size_t id) noexcept {
    received_message& r = ring[id % ring.size()];
    r.present = false;
    return r.header;
}

}  // namespace pipeprop::pb::detail
