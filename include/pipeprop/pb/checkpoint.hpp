// pipeprop/pb/checkpoint.hpp: saving and restoring a PB engine at a drained point through pipeprop's checkpoint
// format (pipeprop/checkpoint.hpp: a directory of .npy files plus a manifest, written atomically).
//
// At a drained point (every pushed micro-batch completed: docs/pb-semantics.md §1) the state of a PB run is: every
// stage's weights, velocity and policy buffers, each stage's last learning rate (LWP velocity form) and the
// counters (micro-batches and samples pushed). The forward-weight history of the sequential executor and the
// predicted weights of the concurrent one are derived from that state, so they are rebuilt on load. Resuming from
// such a checkpoint gives bit-identically the run that did not stop (tests/unit/test_pb_checkpoint.cpp).
//
// Tensors are stored per LAYER, not per stage (names independent of the cut; the same names as the sequential
// trainer's, so its checkpoints and PB's share the weights and velocity):
//   layer_XX.<tensor>                   weights
//   layer_XX.<tensor>.velocity          momentum velocity (AdamW: .first_moment and .second_moment)
//   layer_XX.<tensor>.pb_last_step      LWP weight-difference form: w(k) - w(k-1)
//   layer_XX.<tensor>.pb_discrepancy    PipeMare: delta
//   layer_XX.<tensor>.pb_previous       PipeDream-2BW: the older weight version W(j - 1)
//   layer_XX.<tensor>.pb_accumulated    PipeDream-2BW: the gradient summed so far in the current batch
//   <node>.<state tensor>               running state of stateful layers (Online Normalization)
// Scalars: pb_format (1), pb_policy, pb_stages ("b0-e0,b1-e1,..."), pb_micro_batches, pb_samples,
// pb_stage_<s>_last_learning_rate, pb_stage_<s>_last_weight_decay (optimizer-aware LWP: its AdamW prediction uses
// it; NAdam's momentum product follows from the step count), and optimizer / step_count / samples_seen / init_seed.
// The weights, optimizer state,
// running state and those last four are written and read by the trainers' one layout (checkpoint/training_state.hpp),
// so PB, the sequential trainer and the synchronous executors read each other's weights.
//
// Resharding: the state at a drained point does not depend on the cut (per-layer tensors; the per-stage scalars a
// policy reads are equal over the stages, since every stage's last update was the last micro-batch's: PipeMare's
// last learning rate, which follows the delay, is not read), so a checkpoint loads into
// an engine with another cut: each new stage takes the scalars of the saved stage that held its first layer, and
// the new cut's delays, horizons and derived buffers apply from the next micro-batch on (docs/pb-semantics.md §7).
// The exception is PipeDream-2BW, whose accumulated gradient belongs to a batch sized by the first stage's delay: it
// resumes under its own cut only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/checkpoint.hpp"
#include "pipeprop/checkpoint/training_state.hpp"
#include "pipeprop/network_blocks.hpp"
#include "pipeprop/pb/engine.hpp"

namespace pipeprop::pb {

namespace detail {
inline std::string stages_text(const std::vector<layer_range>& ranges) {
    std::string s;
    for (const layer_range& r : ranges) {
        if (!s.empty()) s += ',';
        s += std::to_string(r.begin) + "-" + std::to_string(r.end);
    }
    return s;
}
inline std::string stage_scalar(std::size_t s, const char* what) {
    std::string idx = std::to_string(s);
    if (idx.size() < 2) idx.insert(0, 2 - idx.size(), '0');
    return "pb_stage_" + idx + "_" + what;
}

/// The saved cut `text` ("b0-e0,b1-e1,...", stages_text) of a network of `layers` layers, and for every stage of
/// `ranges` (the loading engine's cut) the saved stage that held its first layer. Throws checkpoint_error naming
/// `where` when the text is not a cut of the network into consecutive non-empty ranges.
inline std::vector<std::size_t> saved_stages_of(const std::string& text, const std::vector<layer_range>& ranges,
                                                std::size_t layers, const std::string& where) {
    std::vector<layer_range> saved;
    std::size_t pos = 0;
    while (pos <= text.size()) {
        const std::size_t comma = std::min(text.find(',', pos), text.size());
        const std::string item = text.substr(pos, comma - pos);
        const std::size_t dash = item.find('-');
        std::size_t b = 0, e = 0, used_b = 0, used_e = 0;
        try {
            b = std::stoull(item.substr(0, dash), &used_b);
            e = std::stoull(item.substr(dash + 1), &used_e);
        } catch (const std::exception&) {
            used_b = 0;
        }
        if (dash == std::string::npos || used_b != dash || used_e != item.size() - dash - 1 || e <= b ||
            b != (saved.empty() ? 0 : saved.back().end))
            throw checkpoint_error(where + ": pb_stages '" + text + "' is not a cut of the network into stages");
        saved.push_back({b, e});
        pos = comma + 1;
    }
    if (saved.back().end != layers)
        throw checkpoint_error(where + ": pb_stages '" + text + "' does not cover the network's " +
                               std::to_string(layers) + " layers");
    std::vector<std::size_t> of(ranges.size());
    for (std::size_t s = 0; s < ranges.size(); ++s)
        while (!saved[of[s]].contains(ranges[s].begin)) ++of[s];
    return of;
}

/// The per-stage scalar `what` of every stage of the loading engine: that of the saved stage holding its first
/// layer (saved_of). At a drained point every stage's last update was the last micro-batch's, so the saved stages
/// agree where the scalar is read; with `check` (another cut, a scalar the policy reads) a checkpoint whose stages
/// disagree is refused (checkpoint_error naming `where`).
template <class T>
std::vector<T> per_stage_scalar(const checkpoint& c, const char* what, const std::vector<std::size_t>& saved_of,
                                bool check, const std::string& where) {
    std::vector<T> out(saved_of.size());
    for (std::size_t s = 0; s < out.size(); ++s) out[s] = c.scalar_as<T>(stage_scalar(saved_of[s], what));
    if (check)
        for (std::size_t k = 0; c.has_scalar(stage_scalar(k, what)); ++k)
            if (c.scalar_as<T>(stage_scalar(k, what)) != out[0])
                throw checkpoint_error(where + ": the saved stages' " + what + " differ (stage 0: " +
                                       c.scalar(stage_scalar(0, what)) + ", stage " + std::to_string(k) + ": " +
                                       c.scalar(stage_scalar(k, what)) + "); it resumes only under the cut it "
                                       "was made with");
    return out;
}
}  // namespace detail

/// Adds the state of engine e (any pb::engine / pb::pipeline) to checkpoint c (see the file comment). Throws
/// std::logic_error when micro-batches are in flight (drain() first) or the engine failed (engine::failed()),
/// checkpoint_error on a name clash.
template <network_type Net, mitigation_policy Policy, class T, class Loss, class Optimizer>
void save_state(const engine<Net, Policy, T, Loss, Optimizer>& e, checkpoint& c) {
    using stack = layer_stack<Net, T>;
    e.require_usable("save_state");
    if (e.in_flight() != 0)
        throw std::logic_error("pipeprop::pb::save_state: " + std::to_string(e.in_flight()) +
                               " micro-batches are in flight; a PB checkpoint is taken at a drained point (drain())");
    // The stages' slices of a per-parameter buffer, gathered into the network's block layout.
    auto gathered = [&](auto field) {
        std::vector<T> block(stack::parameter_count);
        gather_network_block<stack>(e.stages(), std::span<T>(block), field, "pipeprop::pb::save_state");
        return block;
    };
    const std::vector<T> weights = gathered([](const auto& st) { return st.weights(); });
    std::vector<std::vector<T>> optimizer_state;
    for (std::size_t k = 0; k < Optimizer::state_buffer_names.size(); ++k)
        optimizer_state.push_back(gathered([k](const auto& st) { return st.optimizer_state(k); }));
    std::vector<T> state(stack::state_count);
    gather_network_state<stack>(e.stages(), std::span<T>(state), "pipeprop::pb::save_state");
    // The trainers' layout (checkpoint/training_state.hpp), then PB's own buffers and scalars.
    add_training_state<Net, Optimizer, T>(c, std::span<const T>(weights),
                                          std::vector<std::span<const T>>(optimizer_state.begin(),
                                                                          optimizer_state.end()),
                                          std::span<const T>(state), e.micro_batches_pushed(), e.samples_pushed(),
                                          e.engine_options().seed);
    if constexpr (Policy::predicts_weights && Policy::form == lwp_form::weight_difference)
        add_network_tensors<Net, T>(c, std::span<const T>(gathered([](const auto& st) { return st.last_step(); })),
                                    "pb_last_step");
    if constexpr (Policy::corrects_discrepancy)
        add_network_tensors<Net, T>(c, std::span<const T>(gathered([](const auto& st) { return st.discrepancy(); })),
                                    "pb_discrepancy");
    if constexpr (Policy::double_buffered) {
        add_network_tensors<Net, T>(
            c, std::span<const T>(gathered([](const auto& st) { return st.previous_weights(); })), "pb_previous");
        add_network_tensors<Net, T>(c, std::span<const T>(gathered([](const auto& st) { return st.gradient(); })),
                                    "pb_accumulated");
    }
    c.set_scalar("pb_format", 1);
    c.set_scalar("pb_policy", std::string(Policy::name));
    c.set_scalar("pb_stages", detail::stages_text(e.stage_ranges()));
    c.set_scalar("pb_micro_batches", static_cast<std::uint64_t>(e.micro_batches_pushed()));
    c.set_scalar("pb_samples", static_cast<std::uint64_t>(e.samples_pushed()));
    for (std::size_t s = 0; s < e.stages().size(); ++s)
        c.set_scalar(detail::stage_scalar(s, "last_learning_rate"), e.stages()[s].last_learning_rate());
    if constexpr (Policy::predicts_weights && Policy::form == lwp_form::optimizer_step)
        for (std::size_t s = 0; s < e.stages().size(); ++s)
            c.set_scalar(detail::stage_scalar(s, "last_weight_decay"), e.stages()[s].last_weight_decay());
}

/// Restores engine e from checkpoint c (written by save_state for the same network, policy and optimizer, under
/// any stage cut: resharding, see the file comment). All-or-nothing: everything is read and checked before e
/// changes. Throws checkpoint_error naming `where` and the first problem (other network, other policy or optimizer,
/// a PipeDream-2BW checkpoint under another cut, missing tensor or scalar), std::logic_error when micro-batches are
/// in flight.
template <network_type Net, mitigation_policy Policy, class T, class Loss, class Optimizer>
void load_state(engine<Net, Policy, T, Loss, Optimizer>& e, const checkpoint& c,
                const std::string& where = "checkpoint") {
    using stack = layer_stack<Net, T>;
    e.require_usable("load_state");
    if (e.in_flight() != 0)
        throw std::logic_error("pipeprop::pb::load_state: " + std::to_string(e.in_flight()) +
                               " micro-batches are in flight; drain() first");
    require_signature(c, signature_of<Net, T>(), where);
    if (!c.has_scalar("pb_format")) throw checkpoint_error(where + ": not a PB checkpoint (no pb_format scalar)");
    if (c.scalar_as<int>("pb_format") != 1)
        throw checkpoint_error(where + ": unsupported PB checkpoint format " + c.scalar("pb_format"));
    if (c.scalar("pb_policy") != Policy::name)
        throw checkpoint_error(where + ": made with mitigation policy '" + c.scalar("pb_policy") +
                               "', this pipeline uses '" + std::string(Policy::name) + "'");
    // The saved stage of every stage of e (resharding: the saved cut may differ from e's).
    const std::vector<std::size_t> saved_stage_of =
        detail::saved_stages_of(c.scalar("pb_stages"), e.stage_ranges(), stack::layer_count, where);
    const bool resharded = c.scalar("pb_stages") != detail::stages_text(e.stage_ranges());
    if (Policy::double_buffered && resharded)
        throw checkpoint_error(where + ": made for stages " + c.scalar("pb_stages") + ", this pipeline has " +
                               detail::stages_text(e.stage_ranges()) + "; a " + std::string(Policy::name) +
                               " checkpoint resumes only under the cut it was made with (its batches of "
                               "accumulated gradients follow the first stage's delay)");
    const training_state<T> ts = read_training_state<Net, Optimizer, T>(c, where);
    std::vector<T> step, delta, previous, accumulated;
    if constexpr (Policy::predicts_weights && Policy::form == lwp_form::weight_difference) {
        step.resize(stack::parameter_count);
        read_network_tensors<Net, T>(c, std::span<T>(step), "pb_last_step");
    }
    if constexpr (Policy::corrects_discrepancy) {
        delta.resize(stack::parameter_count);
        read_network_tensors<Net, T>(c, std::span<T>(delta), "pb_discrepancy");
    }
    if constexpr (Policy::double_buffered) {
        previous.resize(stack::parameter_count);
        accumulated.resize(stack::parameter_count);
        read_network_tensors<Net, T>(c, std::span<T>(previous), "pb_previous");
        read_network_tensors<Net, T>(c, std::span<T>(accumulated), "pb_accumulated");
    }
    const auto micro_batches = c.scalar_as<std::uint64_t>("pb_micro_batches");
    const auto samples = c.scalar_as<std::uint64_t>("pb_samples");
    // The last learning rate matters only to a prediction from the velocity or the optimizer's step (LWP, lwp_opt);
    // PipeMare's differs between stages (its warm-up depends on the delay) and is not read.
    constexpr bool reads_last_lr = Policy::predicts_weights && Policy::form != lwp_form::weight_difference;
    const std::vector<T> last_lr =
        detail::per_stage_scalar<T>(c, "last_learning_rate", saved_stage_of, resharded && reads_last_lr, where);
    std::vector<T> last_wd(e.stages().size());
    if constexpr (Policy::predicts_weights && Policy::form == lwp_form::optimizer_step)
        last_wd = detail::per_stage_scalar<T>(c, "last_weight_decay", saved_stage_of, resharded, where);

    constexpr const char* who = "pipeprop::pb::load_state";
    auto& stages = e.stages();
    scatter_network_block<stack>(std::span<const T>(ts.parameters), stages, [](auto& st) { return st.weights(); },
                                 who);
    for (std::size_t k = 0; k < ts.optimizer_state.size(); ++k)
        scatter_network_block<stack>(std::span<const T>(ts.optimizer_state[k]), stages,
                                     [k](auto& st) { return st.optimizer_state(k); }, who);
    if (!step.empty())
        scatter_network_block<stack>(std::span<const T>(step), stages, [](auto& st) { return st.last_step(); }, who);
    if (!delta.empty())
        scatter_network_block<stack>(std::span<const T>(delta), stages, [](auto& st) { return st.discrepancy(); },
                                     who);
    if (!previous.empty()) {
        scatter_network_block<stack>(std::span<const T>(previous), stages,
                                     [](auto& st) { return st.previous_weights(); }, who);
        scatter_network_block<stack>(std::span<const T>(accumulated), stages, [](auto& st) { return st.gradient(); },
                                     who);
    }
    scatter_network_state<stack>(std::span<const T>(ts.state), stages, who);
    for (std::size_t s = 0; s < stages.size(); ++s) stages[s].set_last_weight_decay(last_wd[s]);
    e.restore_counters(static_cast<std::size_t>(micro_batches), static_cast<std::size_t>(samples), last_lr);
}

/// save_state into a new checkpoint, written atomically to directory `dir` (pipeprop::save_checkpoint).
template <network_type Net, mitigation_policy Policy, class T, class Loss, class Optimizer>
void save_checkpoint(const engine<Net, Policy, T, Loss, Optimizer>& e, const std::filesystem::path& dir) {
    checkpoint c;
    save_state(e, c);
    pipeprop::save_checkpoint(c, dir);
}

/// Loads directory `dir` (pipeprop::load_checkpoint) and restores e from it (load_state).
template <network_type Net, mitigation_policy Policy, class T, class Loss, class Optimizer>
void load_checkpoint(engine<Net, Policy, T, Loss, Optimizer>& e, const std::filesystem::path& dir) {
    load_state(e, pipeprop::load_checkpoint(dir), dir.string());
}

}  // namespace pipeprop::pb
