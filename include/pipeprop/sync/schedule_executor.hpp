// pipeprop/sync/schedule_executor.hpp: the synchronous pipeline executor: one optimizer step over the m micro-batches of
// a batch B, every stage running exactly the op list of the schedule generator (sync/schedule.hpp), with 2BP
// (2BP-paper, Rae et al. arXiv 2405.18047, §3) on or off.
//
// Semantics (docs/schedules.md §3): the batch x [B, input size] with targets [B, targets per sample]
// is split into m micro-batches of sizes differing by at most one (the first B mod m get one sample more; B not
// divisible by m works); the last stage's F computes the loss policy's totals and gradient of its micro-batch with
// gradient_scale 1/N (N: the counted targets of the WHOLE batch: B samples, or its non-ignored tokens), so the
// accumulated gradient is that of the MEAN loss over the whole batch whatever m is (docs/pitfalls.md item 1). Every
// stage zeroes its gradient block, runs its op list (p2 of each micro-batch ADDS into the block), checks that all
// of its W (or BW) ops have run (a std::logic_error otherwise: deferred p2 work must be complete), then applies one
// update of the optimizer policy (momentum SGD by default, AdamW) to its own parameter block. The W's of a stage run in
// micro-batch order in every schedule, so all schedules and both executors give bit-identical results for the
// same m; results equal the non-pipelined step on the whole batch up to float summation order.
//
// Consecutive steps (consecutive_steps, up to executor_options::max_consecutive_steps): k batches run as one plan
// of k steps without a barrier (sync/schedule.hpp consecutive_steps): each stage updates after its own last op of
// step n and goes on with step n + 1 while its neighbours finish step n (ZB-H2's steady state, ZB-paper §3.1). Every
// stage runs the same ops on the same weights in the same order as k step() calls, so the results are bitwise those
// of k step() calls (tests/unit/test_sync_consecutive_steps.cpp).
//
// A batch with fewer samples than m (e.g. the last batch of an epoch) is handled: it runs with m' = B
// micro-batches of one sample (interleaved 1F1B: B rounded down to a multiple of its devices when B exceeds them,
// as its generator needs), with the same schedule kind generated for m'. The buffers are allocated at construction
// for the largest slot and channel needs over every m' a step can use (a smaller m' can need more slots on a stage:
// interleaved 1F1B's warm-up), so no step allocates; each plan is checked to fit. B == 0 or B > max_batch is rejected (std::invalid_argument).
//
// Boundaries: each boundary has a forward boundary_channel (activations + labels, stage s -> s+1) and a backward
// one (input gradients, s+1 -> s) whose capacities are channel_capacities() of the schedule; a sender copies its
// output into a channel buffer and sends the header; the receiver copies the payload into its own slot and
// releases the buffer (boundary_channel.hpp). Activation memory per stage = slot_plan() slots, i.e. the
// schedule's peak in-flight count, not m (docs/pitfalls.md item 11).
//
// Two executors, chosen at run time (executor_kind), same ops (sync/op_runner.hpp runs them), bit-identical results:
//   concurrent: the engines' flow graph (lane_graph.hpp) with one serial node per stage; a node's input is a
//               boundary message (or the start token); on each message it runs as many of its next ops as are
//               ready and sends messages to its neighbours' nodes.
//   sequential: a single thread runs all ops in global_order() (the order of the schedule's unit-cost timeline).
// Every op and the optimizer step are recorded as op_spans (seconds since the step started) for traces.
//
// Failures: a layer that throws in F, B (p1), W (p2) or BW is rethrown as pipeprop::stage_error naming the stage, the
// micro-batch and the step; the flow graph is cancelled (no hang) and reset. The executor is usable again once the
// caller restores the parameters and velocity from before the step (see step()).
//
// Stages in several processes (options::remote, remote_transport.hpp, pipeprop/mpi/mpi_transport.hpp;
// the exchange with the other processes is sync/remote_stages.hpp): this process runs only its local stages; every
// stage runs the same ops as in one process, so the losses, the local stages' weights and optimizer state are
// bitwise those of a single process (tests/mpi/test_mpi_sync.cpp); step_result's loss, correct and targets come from
// the notes on every process, its gradient_norm covers the local stages. No message for timeout():
// remote_timeout_error naming the waiting stage. Not with clipping (a global norm), the sequential executor or
// evaluate() (the other stages' weights are elsewhere).
//
// Global reductions (docs/pitfalls.md item 7): every step reports the L2 norm of the whole network's gradient (all
// stages, fixed order); optional gradient clipping (executor_options::max_gradient_norm) clips that global norm,
// never a per-stage one, so with clipping the updates wait until every stage's p2 is done (a barrier after the
// graph; the schedules' overlap of one stage's update with another stage's backward is then lost).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "pipeprop/check_policies.hpp"
#include "pipeprop/boundary_channel.hpp"
#include "pipeprop/evaluation.hpp"
#include "pipeprop/lane_graph.hpp"
#include "pipeprop/network_blocks.hpp"
#include "pipeprop/non_finite_loss_error.hpp"
#include "pipeprop/remote_transport.hpp"
#include "pipeprop/layer_stack.hpp"
#include "pipeprop/loss/default_loss.hpp"
#include "pipeprop/loss/loss_policy.hpp"
#include "pipeprop/loss/softmax_cross_entropy.hpp"
#include "pipeprop/optim/hyperparameters.hpp"
#include "pipeprop/optim/optimizer_policy.hpp"
#include "pipeprop/optim/sgd.hpp"
#include "pipeprop/pipeline_layout.hpp"
#include "pipeprop/stage_program.hpp"
#include "pipeprop/stage_error.hpp"
#include "pipeprop/stage_inference.hpp"
#include "pipeprop/sync/op_runner.hpp"
#include "pipeprop/sync/op_span.hpp"
#include "pipeprop/sync/schedule.hpp"
#include "pipeprop/sync/step_plan.hpp"
#include "pipeprop/sync/executor_options.hpp"
#include "pipeprop/sync/non_finite_undo.hpp"
#include "pipeprop/sync/remote_stages.hpp"
#include "pipeprop/sync/schedule_analysis.hpp"
#include "pipeprop/sync/stage.hpp"

namespace pipeprop::sync {

/// The synchronous pipeline executor over layer_stack<Net, T> cut into stages, running the op lists of schedule
/// `kind` with 2BP on or off (both chosen at construction: the op lists are data, so every schedule runs the same
/// compiled code). Loss and Optimizer are policies (loss/loss_policy.hpp, optim/optimizer_policy.hpp): by default
/// softmax cross-entropy over the network output and momentum SGD; e.g. token_cross_entropy and optim::adamw for a
/// transformer. Not copyable or movable (its flow graph refers to it). See the file comment for the semantics;
/// pipeline_executor (sync/executor.hpp) is the same executor with the schedule fixed by template arguments.
template <network_type Net, class T = float, class Loss = pipeprop::detail::default_loss_t<Net, T>,
          class Optimizer = optim::sgd<T>>
class schedule_executor {
public:
    using stack_type = layer_stack<Net, T>;
    using stage_type = stage<Net, T, Optimizer>;
    using value_type = T;
    using loss_type = Loss;
    using optimizer_type = Optimizer;
    using options_type = basic_executor_options<typename Optimizer::config_type>;
    static_assert(check_policies<Loss, Optimizer, T, typename stack_type::output_shape>());
    static constexpr std::size_t input_size = stack_type::input_shape::size;
    /// int32 targets per sample: 1 (a class label) or L (a sequence's next tokens).
    static constexpr std::size_t targets_per_sample = Loss::targets_per_sample;

    /// Stages are the given ranges (e.g. partition_at(...) or stage_ranges<Layout>()): non-empty, contiguous,
    /// covering all layers in order (check_partition). Runs schedule `kind` for opt.micro_batches micro-batches,
    /// with 2BP when two_stage_bp. Throws std::invalid_argument naming the offending range or option
    /// (micro_batches == 0, max_batch == 0, an invalid optimizer config, a cut where the network allows none).
    schedule_executor(schedule_kind kind, bool two_stage_bp, std::vector<layer_range> stages,
                      const options_type& opt)
        : schedule_executor(kind, two_stage_bp, std::vector<stage_program<stack_type>>{}, std::move(stages), opt, {}) {}

    /// Embedding: as above, on parameter storage the caller owns, `storage`
    /// [stack_type::parameter_count] in the network's block layout (layer_stack: layers in order). Its values are the
    /// initial weights (opt.seed is not used for them); every optimizer step writes into it in place, so the caller
    /// (a framework that keeps the weights in its own tensors) sees the current weights between steps. It must
    /// outlive the executor and must not be written by the caller during a step. Optimizer state and running state
    /// stay inside the executor. Throws as above, and std::invalid_argument for a storage of the wrong size.
    schedule_executor(schedule_kind kind, bool two_stage_bp, std::vector<layer_range> stages, const options_type& opt,
                      std::span<T> storage)
        : schedule_executor(kind, two_stage_bp, std::vector<stage_program<stack_type>>{}, std::move(stages), opt,
                            storage) {
        if (storage.empty() && stack_type::parameter_count > 0)
            throw std::invalid_argument("pipeprop::sync::pipeline_executor: the caller's parameter storage is empty");
    }

    /// As above, with each stage's code given (stage_program.hpp; static_stage_programs<Layout>() for a static
    /// layout).
    schedule_executor(schedule_kind kind, bool two_stage_bp, std::vector<stage_program<stack_type>> programs,
                      const options_type& opt)
        : schedule_executor(kind, two_stage_bp, std::move(programs), {}, opt, {}) {}

    /// The executor for a static pipeline_layout (same Net and T). Throws as the constructor.
    template <class Layout>
    [[nodiscard]] static std::unique_ptr<schedule_executor> for_layout(schedule_kind kind, bool two_stage_bp,
                                                                       const options_type& opt) {
        static_assert(std::is_same_v<typename Layout::stack_type, stack_type>,
                      "pipeprop::sync::schedule_executor::for_layout: the layout is over another network or "
                      "value type.");
        return std::make_unique<schedule_executor>(kind, two_stage_bp, static_stage_programs<Layout>(), opt);
    }

private:
    schedule_executor(schedule_kind kind, bool two_stage_bp, std::vector<stage_program<stack_type>> programs,
                      std::vector<layer_range> stages, const options_type& opt, std::span<T> storage)
        : kind_(kind),
          two_stage_bp_(two_stage_bp),
          ranges_(programs.empty() ? std::move(stages) : ranges_of(programs)),
          opt_(opt) {
        check_partition(ranges_, stack_type::layer_count, "pipeprop::sync::pipeline_executor");
        if (programs.empty()) programs = dynamic_stage_programs<stack_type>(ranges_);
        check_cuts_allowed<stack_type>(ranges_);
        if (opt_.micro_batches == 0)
            throw std::invalid_argument("pipeprop::sync::pipeline_executor: micro_batches must be >= 1");
        if (opt_.max_batch == 0)
            throw std::invalid_argument("pipeprop::sync::pipeline_executor: max_batch must be >= 1");
        if (!(opt_.max_gradient_norm >= 0) || !std::isfinite(opt_.max_gradient_norm))
            throw std::invalid_argument("pipeprop::sync::pipeline_executor: max_gradient_norm must be finite and >= 0");
        const std::size_t p = ranges_.size();
        max_b_ = (opt_.max_batch + opt_.micro_batches - 1) / opt_.micro_batches;
        plans_.resize(opt_.micro_batches + 1);
        const step_plan& full = plan_for(opt_.micro_batches);
        if (opt_.max_consecutive_steps == 0)
            throw std::invalid_argument("pipeprop::sync::pipeline_executor: max_consecutive_steps must be >= 1");
        // Buffers for every plan a step can run: the micro-batch count of every batch size up to max_batch (a short
        // batch's plan may need more slots on some stage than the full one: interleaved 1F1B's warm-up) and, with
        // consecutive steps, their plan (its channels may hold more).
        std::vector<std::size_t> slots(p, 0);
        caps_.assign(p - 1, channel_capacity{});
        const auto widen = [&](const step_plan& pl) {
            for (std::size_t b = 0; b < caps_.size(); ++b) {
                caps_[b].forward = std::max(caps_[b].forward, pl.caps[b].forward);
                caps_[b].backward = std::max(caps_[b].backward, pl.caps[b].backward);
            }
            for (std::size_t s = 0; s < p; ++s) slots[s] = std::max(slots[s], pl.slots[s].slots);
        };
        widen(full);
        for (std::size_t batch = 1; batch <= std::min(opt_.max_batch, opt_.micro_batches); ++batch)
            widen(plan_for(micro_batches_for(batch)));
        if (opt_.max_consecutive_steps > 1)
            widen(make_step_plan(kind_, p, opt_.micro_batches, two_stage_bp_, opt_.max_consecutive_steps,
                                 opt_.chunks));
        std::vector<T> w;  // the initial weights, unless the caller's storage holds them
        if (storage.empty()) {
            w.resize(stack_type::parameter_count);
            stack_.init_parameters(w, opt_.seed);
        }
        for (std::size_t s = 0; s < p; ++s)
            stages_.push_back(std::make_unique<stage_type>(stack_, s, programs[s], max_b_, slots[s],
                                                           opt_.optimizer, targets_per_sample,
                                                           std::span<const T>(w), storage));
        make_channels();
        // one lane per device: per stage, or the devices of a virtual-stage schedule (their stages on one node)
        std::vector<std::size_t> lane_of(p);
        for (std::size_t s = 0; s < p; ++s) lane_of[s] = full.sc.device_of_stage(s);
        local_.assign(p, true);
        if (opt_.remote != nullptr) remote_.setup_remote(lane_of);
        graph_ = std::make_unique<lane_graph<graph_runner>>(graph_runner_,
                                                            typename lane_graph<graph_runner>::lane_map{lane_of});
    }

public:
    schedule_executor(const schedule_executor&) = delete;
    schedule_executor& operator=(const schedule_executor&) = delete;

    /// One optimizer step on the batch x [B, input_size] (row-major) with targets [B, targets_per_sample] and the
    /// step's hyperparameters h (learning rate per mean-loss gradient, momentum, weight decay; every stage's update
    /// uses them). Throws, before any work: std::invalid_argument when B == 0, B > max_batch,
    /// x.size() != B * input_size or the optimizer rejects h (Optimizer::check, naming the field);
    /// std::out_of_range for a label outside
    /// [0, classes) (naming the sample). pipeprop::stage_error when a layer or the loss throws inside a stage
    /// (stage, micro-batch within the step, phase and step named; the original exception nested), std::logic_error
    /// on a broken invariant (p2 incomplete before the optimizer step, a message of the wrong size).
    /// After any exception during the work the executor is usable again (the graph and channels are reset before
    /// the exception leaves step()), but the step was interrupted: stages that had reached their optimizer step
    /// keep its update (their step counts are rolled back), the others do not. Reset: restore the parameters and
    /// velocity from before the step (set_parameters / set_velocity, e.g. from parameters() / velocity() saved
    /// before it, or a checkpoint); the next step then gives exactly the result of an executor that never failed
    /// (tests/unit/test_stage_failures.cpp). A NaN or infinite loss is returned in step_result::loss (the update is
    /// already applied): step_or_undo is the same step with the trainers' non-finite-loss policy (undo and throw
    /// non_finite_loss_error), what a training loop should call.
    step_result step(std::span<const T> x, std::span<const std::int32_t> labels,
                     const optim::hyperparameters<double>& h) {
        const std::size_t batch = labels.size() / targets_per_sample;
        const input_type in{x.data(), labels.data(), check_step_input(x, labels, h), h};
        run_plan(plan_for(micro_batches_for(batch)), std::span<const input_type>(&in, 1), batch);
        return results_.front();
    }

    /// One batch of consecutive_steps: x [B, input_size] (row-major), targets [B, targets_per_sample] and the
    /// step's hyperparameters.
    struct batch_view {
        std::span<const T> x;
        std::span<const std::int32_t> labels;
        optim::hyperparameters<double> h{};
    };

    /// k = batches.size() optimizer steps, one per batch in order, run back to back without a barrier between them
    /// (sync/schedule.hpp, consecutive_steps: stage s starts step n + 1 right after its own update of step n, while
    /// later stages still finish step n; ZB-H2's steady state). The result, per step, and every weight, optimizer
    /// state and running-state bit equal those of k calls of step() on the same batches (the same ops run on the
    /// same weights in the same order on every stage; tests/unit/test_sync_consecutive_steps.cpp). Requires
    /// 1 <= k <= options().max_consecutive_steps, every batch of the same size B >= micro_batches, and no gradient
    /// clipping (max_gradient_norm == 0: a global norm is a barrier). Throws std::invalid_argument for any of these
    /// (naming it) and as step() for each batch's input, all before any work; during the work as step() (the
    /// interrupted steps keep the updates of the stages that made them, step counts rolled back: restore the state
    /// from before the call).
    std::vector<step_result> consecutive_steps(std::span<const batch_view> batches) {
        const std::string who = "pipeprop::sync::schedule_executor::consecutive_steps: ";
        const std::size_t k = batches.size();
        if (k == 0 || k > opt_.max_consecutive_steps)
            throw std::invalid_argument(who + std::to_string(k) + " batches; 1 to max_consecutive_steps = " +
                                        std::to_string(opt_.max_consecutive_steps) + " run back to back");
        if (opt_.max_gradient_norm > 0)
            throw std::invalid_argument(who + "global gradient clipping (max_gradient_norm > 0) needs a barrier after "
                                        "every step; run step() instead");
        const std::size_t batch = batches[0].labels.size() / targets_per_sample;
        std::vector<input_type> in;
        for (const auto& bv : batches) {
            if (bv.labels.size() != batches[0].labels.size())
                throw std::invalid_argument(who + "every batch must have the same size (batch " +
                                            std::to_string(in.size()) + " has " +
                                            std::to_string(bv.labels.size() / targets_per_sample) + " samples, batch 0 " +
                                            std::to_string(batch) + ")");
            in.push_back({bv.x.data(), bv.labels.data(),
                          check_step_input(bv.x, bv.labels, bv.h, who + "batch " + std::to_string(in.size()) + ": "),
                          bv.h});
        }
        if (batch < opt_.micro_batches)
            throw std::invalid_argument(who + "batches of " + std::to_string(batch) + " samples are fewer than the " +
                                        std::to_string(opt_.micro_batches) + " micro-batches; run step() instead");
        run_plan(k == 1 ? plan_for(opt_.micro_batches) : consecutive_plan(k), in, batch);
        return results_;
    }

    /// Mean loss and accuracy of the current parameters over n samples x [n, input_size], targets
    /// [n, targets_per_sample]: inference
    /// through the stages in chunks of max_batch (pipeprop/evaluation.hpp; running state read, never updated).
    /// Throws std::invalid_argument for n == 0 or sizes that do not match, std::out_of_range for a label outside
    /// [0, classes). Allocates its buffers on first use. Not during a step.
    [[nodiscard]] evaluation evaluate(std::span<const T> x, std::span<const std::int32_t> labels) {
        const std::size_t n = labels.size() / targets_per_sample;
        if (labels.size() != n * targets_per_sample)
            throw std::invalid_argument("pipeprop::sync::schedule_executor::evaluate: " +
                                        std::to_string(labels.size()) + " targets, not a multiple of " +
                                        std::to_string(targets_per_sample) + " per sample");
        if (x.size() != n * input_size)
            throw std::invalid_argument("pipeprop::sync::schedule_executor::evaluate: input has " +
                                        std::to_string(x.size()) + " values, expected n x " +
                                        std::to_string(input_size) + " = " + std::to_string(n * input_size));
        if (opt_.remote != nullptr && !remote_stages_current_)
            throw std::logic_error("pipeprop::sync::schedule_executor::evaluate: the stages of other processes "
                                   "(options::remote) are not here (load_remote_stages gives them)");
        if (!eval_) eval_.emplace(stack_, ranges_, opt_.max_batch);
        return evaluate_in_chunks<Loss>(
            labels.data(), n, opt_.max_batch,
            [&](std::size_t first, std::size_t b) {
                return eval_->run(x.data() + first * input_size, b,
                                  [&](std::size_t s, auto& act, std::size_t bb, auto& ws) {
                                      const stage_type& st = *stages_[s];
                                      st.program().infer(stack_, st.parameters(), act, bb, ws, st.state());
                                  });
            },
            "pipeprop::sync::schedule_executor::evaluate");
    }

    /// With options::remote, between steps: sets the parameters and running state of the stages other processes run
    /// from whole-network blocks (parameters [parameter_count], state [state_count]; e.g. gathered from every
    /// process), so that evaluate() can run here until the next step. The local stages are not changed. Throws
    /// std::logic_error without a transport, std::invalid_argument for a wrong size.
    void load_remote_stages(std::span<const T> parameters, std::span<const T> state) {
        if (opt_.remote == nullptr)
            throw std::logic_error(std::string(who) + "::load_remote_stages: every stage runs in this process");
        if (parameters.size() != stack_type::parameter_count || state.size() != stack_type::state_count)
            throw std::invalid_argument(std::string(who) + "::load_remote_stages: expected " +
                                        std::to_string(stack_type::parameter_count) + " parameters and " +
                                        std::to_string(stack_type::state_count) + " state values");
        for (std::size_t s = 0; s < ranges_.size(); ++s) {
            if (local_[s]) continue;
            const std::span<T> w = stages_[s]->parameters(), st = stages_[s]->state();
            std::copy_n(parameters.begin() + static_cast<std::ptrdiff_t>(stack_type::parameter_offset[ranges_[s].begin]),
                        w.size(), w.begin());
            std::copy_n(state.begin() + static_cast<std::ptrdiff_t>(stack_type::state_offset[ranges_[s].begin]),
                        st.size(), st.begin());
        }
        remote_stages_current_ = true;
    }
    /// Whether stage s runs in this process (always, without options::remote).
    [[nodiscard]] bool is_local(std::size_t s) const { return local_.at(s); }

    /// consecutive_steps() with the trainers' non-finite-loss policy: when step n's loss is NaN or infinite, the
    /// state of before the call is restored, the steps before n are run again one at a time (step(), bit-identical
    /// to their consecutive run) and non_finite_loss_error is thrown for step n as step_or_undo does, so the
    /// executor ends exactly where step_or_undo on each batch in turn would. samples_seen: the caller's count before
    /// the first batch. Otherwise as consecutive_steps().
    std::vector<step_result> consecutive_steps_or_undo(std::span<const batch_view> batches,
                                                       std::uint64_t samples_seen) {
        undo_.save_undo_state();
        const std::uint64_t first = steps_;
        auto r = consecutive_steps(batches);
        for (std::size_t n = 0; n < r.size(); ++n)
            if (!std::isfinite(r[n].loss)) {
                undo_.restore_undo_state(r.size());
                std::vector<step_result> before;
                for (std::size_t i = 0; i < n; ++i)
                    before.push_back(step(batches[i].x, batches[i].labels, batches[i].h));
                undo_type::throw_non_finite(r[n].loss, first + n, samples_seen + n * r[0].batch, batches[n].h);
            }
        return r;
    }

    /// step() with the trainers' non-finite-loss policy (the same as sequential_trainer::train_batch): when the
    /// batch's loss is NaN or infinite, the parameters, velocity and running state of before the step are restored
    /// (the pipeline applies its update before the loss is known) and non_finite_loss_error is thrown, naming the
    /// step, `samples_seen` (the caller's count before this batch) and the learning rate. Otherwise as step().
    step_result step_or_undo(std::span<const T> x, std::span<const std::int32_t> labels,
                             const optim::hyperparameters<double>& h, std::uint64_t samples_seen) {
        const std::uint64_t step_number = steps_;
        undo_.save_undo_state();
        const step_result r = step(x, labels, h);
        if (!std::isfinite(r.loss)) {
            undo_.restore_undo_state(1);
            undo_type::throw_non_finite(r.loss, step_number, samples_seen, h);
        }
        return r;
    }

    /// Number of stages p.
    [[nodiscard]] std::size_t stage_count() const noexcept { return ranges_.size(); }
    /// The stage cut: stage s runs layers ranges()[s].
    [[nodiscard]] const std::vector<layer_range>& ranges() const noexcept { return ranges_; }
    /// Stage s (its parameters, gradient, optimizer state, slots). Throws std::out_of_range for s >= p.
    /// Modifying a stage while a step runs is undefined.
    [[nodiscard]] const stage_type& stage_at(std::size_t s) const { return *stages_.at(s); }
    [[nodiscard]] stage_type& stage_at(std::size_t s) { return *stages_.at(s); }
    /// The options the executor was built with.
    [[nodiscard]] const options_type& options() const noexcept { return opt_; }
    /// The schedule kind and whether 2BP splits the backward.
    [[nodiscard]] schedule_kind kind() const noexcept { return kind_; }
    [[nodiscard]] bool two_stage_bp() const noexcept { return two_stage_bp_; }
    /// The schedule the executor runs for full batches (m micro-batches).
    [[nodiscard]] const schedule& current_schedule() const { return plans_[opt_.micro_batches]->sc; }
    /// Activation slots per stage (= the schedule's peak in-flight micro-batches per stage).
    [[nodiscard]] std::vector<std::size_t> activation_slots() const {
        std::vector<std::size_t> n;
        for (const auto& st : stages_) n.push_back(st->slots());
        return n;
    }
    /// Capacities of the boundary channels (messages), per boundary.
    [[nodiscard]] const std::vector<channel_capacity>& channel_sizes() const noexcept { return caps_; }
    /// Micro-batch size for which the buffers are allocated: ceil(max_batch / m).
    [[nodiscard]] std::size_t max_micro_batch() const noexcept { return max_b_; }
    /// Optimizer steps taken.
    [[nodiscard]] std::uint64_t steps() const noexcept { return steps_; }
    /// Sets the step counter (a resumed run: sync::load_state). Not during a step.
    void set_steps(std::uint64_t n) noexcept { steps_ = n; }

    /// The whole network's parameter block [stack_type::parameter_count], gathered from the stages.
    [[nodiscard]] std::vector<T> parameters() const {
        return gather([](const stage_type& s) { return s.parameters(); });
    }
    /// The same into out [stack_type::parameter_count] (no allocation). Throws std::invalid_argument for a size.
    void copy_parameters(std::span<T> out) const {
        gather_network_block<stack_type>(stages_, out, [](const stage_type& s) { return s.parameters(); }, who);
    }
    /// The last step's gradient of the mean loss, whole-network layout (what the update used: with
    /// max_gradient_norm > 0, the clipped gradient).
    [[nodiscard]] std::vector<T> gradient() const { return gather([](const stage_type& s) { return s.gradient(); }); }
    /// Number of the optimizer's per-parameter state buffers (Optimizer::state_buffer_names).
    static constexpr std::size_t optimizer_buffer_count = Optimizer::state_buffer_names.size();
    /// The optimizer's state buffer k (e.g. SGD's velocity, AdamW's first or second moment), whole-network layout.
    /// Throws std::out_of_range for k >= optimizer_buffer_count.
    [[nodiscard]] std::vector<T> optimizer_state(std::size_t k) const {
        check_buffer(k);
        return gather([k](const stage_type& s) { return s.optimizer().state_buffer(k); });
    }
    /// Sets the optimizer's state buffer k from a whole-network block. Throws std::out_of_range for a bad k,
    /// std::invalid_argument for a wrong size.
    void set_optimizer_state(std::size_t k, std::span<const T> v) {
        check_buffer(k);
        scatter_network_block<stack_type>(v, stages_, [k](stage_type& s) { return s.optimizer().state_buffer(k); },
                                          "pipeprop::sync::pipeline_executor::set_optimizer_state");
    }
    /// The optimizer's step count (updates applied; AdamW's bias corrections follow it), the same on every stage
    /// (with options::remote: on every stage of this process).
    [[nodiscard]] std::uint64_t optimizer_step_count() const {
        for (std::size_t s = 0; s < stages_.size(); ++s)
            if (local_[s]) return stages_[s]->optimizer().step_count();
        return stages_.front()->optimizer().step_count();
    }
    /// Sets every stage's optimizer step count (a resumed run: sync::load_state). Not during a step.
    void set_optimizer_step_count(std::uint64_t n) {
        for (auto& st : stages_) st->optimizer().set_step_count(n);
    }
    /// Momentum-SGD velocity, whole-network layout (optimizer_state(0) of optim::sgd).
    [[nodiscard]] std::vector<T> velocity() const
        requires std::is_same_v<Optimizer, optim::sgd<T>>
    {
        return optimizer_state(0);
    }
    /// Sets all parameters from a whole-network block. Throws std::invalid_argument for a wrong size.
    void set_parameters(std::span<const T> w) {
        remote_stages_current_ = false;
        scatter_network_block<stack_type>(w, stages_, [](stage_type& s) { return s.parameters(); },
                                          "pipeprop::sync::pipeline_executor::set_parameters");
    }
    /// The running state of the stateful layers, whole-network layout [stack_type::state_count] (empty when none).
    [[nodiscard]] std::vector<T> state() const {
        std::vector<T> out(stack_type::state_count);
        gather_network_state<stack_type>(stages_, std::span<T>(out), who);
        return out;
    }
    /// Sets the running state from a whole-network block. Throws std::invalid_argument for a wrong size.
    void set_state(std::span<const T> s) {
        scatter_network_state<stack_type>(s, stages_, "pipeprop::sync::pipeline_executor::set_state");
    }
    /// Sets the momentum-SGD velocity (e.g. from a checkpoint). Throws std::invalid_argument for a wrong size.
    void set_velocity(std::span<const T> v)
        requires std::is_same_v<Optimizer, optim::sgd<T>>
    {
        set_optimizer_state(0, v);
    }

    /// The spans of the last step: every op and each stage's optimizer step, per stage in execution order.
    [[nodiscard]] std::vector<op_span> spans() const {
        std::vector<op_span> all;
        for (const auto& rt : runner_.runtimes()) all.insert(all.end(), rt.spans.begin(), rt.spans.end());
        return all;
    }

private:
    using clock = std::chrono::steady_clock;
    using runner_type = op_runner<T, stage_type, Loss>;
    using input_type = typename runner_type::step_input;
    using remote_type = detail::remote_stages<schedule_executor>;
    friend remote_type;  // the part for stages in other processes (sync/remote_stages.hpp) reads the state below
    using undo_type = detail::non_finite_undo<schedule_executor, T>;
    friend undo_type;  // the non-finite-loss policy's saved state (sync/non_finite_undo.hpp)

    // The lane graph's runner: the op interpreter, and the transport for messages to other processes.
    struct graph_runner {
        schedule_executor& ex;
        void deliver(std::size_t s, const boundary_message& m) { ex.runner_.deliver(s, m); }
        [[nodiscard]] bool ready(std::size_t s) const { return ex.runner_.ready(s); }
        template <class Send>
        void run_next(std::size_t s, Send& send) {
            ex.runner_.run_next(s, send);
        }
        void send_remote(std::size_t to, const boundary_message& m) { ex.remote_.send_remote(to, m); }
    };

    // Runs the plan's steps on `in` (one per step, batches of `batch` samples): the graph (or the sequential order),
    // the deferred clipped updates, the checks; one step_result per step in results_ (no allocation after the first
    // run of as many steps). On an exception the graph and channels
    // are reset and the step counts of the stages' updates made in this run rolled back before it leaves.
    void run_plan(const step_plan& pl, std::span<const input_type> in, std::size_t batch) {
        const bool clipping = opt_.max_gradient_norm > 0;
        runner_.begin_steps(pl, in, batch, steps_, clipping);
        remote_stages_current_ = false;
        ++run_;
        const std::size_t m = pl.sc.micro_batches_per_step();
        if (opt_.remote != nullptr) remote_.begin_steps(steps_, in.size(), m);
        const auto t0 = clock::now();
        try {
            if (opt_.executor == executor_kind::concurrent) {
                if (opt_.remote != nullptr) remote_.deliver_backlog();
                graph_->wake_all();
                graph_->wait();
                if (opt_.remote != nullptr) remote_.run_with_remote();
            } else {
                run_sequential(pl);
            }
            if (clipping) {  // global clipping: every stage's p2 is done, then all update
                const double norm = global_gradient_norm();
                const T scale = norm > opt_.max_gradient_norm ? static_cast<T>(opt_.max_gradient_norm / norm) : T(1);
                for (std::size_t s = 0; s < ranges_.size(); ++s) runner_.update_stage(s, scale);
            }
        } catch (...) {
            if (opt_.remote != nullptr) {  // messages put by this thread may still run: let them end first
                try {
                    graph_->wait();
                } catch (...) {
                }
                report_exception(*opt_.remote, std::current_exception());  // the other ranks name this one and stop
                remote_.clear_backlog();
            }
            graph_->reset();
            make_channels();
            for (std::size_t s = 0; s < ranges_.size(); ++s) {  // the failed steps do not count anywhere
                auto& o = stages_[s]->optimizer();
                o.set_step_count(o.step_count() - runner_.runtime(s).updates);
            }
            throw;
        }
        const double seconds = std::chrono::duration<double>(clock::now() - t0).count();
        for (std::size_t s = 0; s < ranges_.size(); ++s)
            if (local_[s] && !runner_.runtime(s).updated)
                throw std::logic_error("pipeprop::sync::pipeline_executor: stage " + std::to_string(s) +
                                       " did not finish its op list (stopped at op " +
                                       std::to_string(runner_.runtime(s).next) + ")");
        const std::size_t k = in.size();
        steps_ += k;
        results_.assign(k, step_result{});
        const bool last_here = local_.back();
        for (std::size_t n = 0; n < k; ++n) {
            step_result& r = results_[n];
            r.batch = batch;
            r.micro_batches = m;
            r.seconds = seconds / static_cast<double>(k);
            std::size_t noted = 0;
            for (std::size_t j = 0; j < m; ++j) {  // fixed order: bit-reproducible
                const loss_totals& t = remote_.totals_of(n * m + j);
                r.loss += t.loss_sum;
                r.correct += t.correct;
                noted += t.count;
            }
            r.targets = last_here ? in[n].counted : noted;
            r.loss = r.targets > 0 ? r.loss / static_cast<double>(r.targets) : 0.0;
            double sq = 0;  // the stages' shares in stage order (global_gradient_norm)
            for (const auto& rt : runner_.runtimes()) sq += rt.squared_gradient[n];
            r.gradient_norm = std::sqrt(sq);
        }
    }

    // The plan of k consecutive full steps (m micro-batches each), built on first use; it must fit the buffers.
    const step_plan& consecutive_plan(std::size_t k) {
        auto& slot = consecutive_plans_[k];
        if (!slot) {
            auto p = std::make_unique<step_plan>(
                make_step_plan(kind_, ranges_.size(), opt_.micro_batches, two_stage_bp_, k, opt_.chunks));
            check_plan_fits(*p, activation_slots(), caps_, opt_.micro_batches);
            slot = std::move(p);
        }
        return *slot;
    }

    // The micro-batches a step of `batch` samples runs with: min(m, batch); interleaved 1F1B rounds a count above
    // its devices down to a multiple of them (what its generator takes).
    [[nodiscard]] std::size_t micro_batches_for(std::size_t batch) const noexcept {
        std::size_t m = std::min(opt_.micro_batches, batch);
        if (kind_ == schedule_kind::interleaved_1f1b && opt_.chunks > 0) {
            const std::size_t devices = ranges_.size() / opt_.chunks;
            if (devices > 0 && m > devices) m -= m % devices;
        }
        return m;
    }

    // The plan for m' micro-batches, built on first use; after construction (whose buffers cover every plan a step
    // can run) it is checked to fit them (step_plan.hpp).
    const step_plan& plan_for(std::size_t m) {
        auto& slot = plans_[m];
        if (!slot) {
            auto p = std::make_unique<step_plan>(make_step_plan(kind_, ranges_.size(), m, two_stage_bp_, 1, opt_.chunks));
            if (!stages_.empty()) check_plan_fits(*p, activation_slots(), caps_, opt_.micro_batches);
            slot = std::move(p);
        }
        return *slot;
    }

    void make_channels() {
        forward_.clear();
        backward_.clear();
        for (std::size_t b = 0; b + 1 < ranges_.size(); ++b) {
            const std::size_t n = stack_type::activation_size[ranges_[b].end];
            forward_.push_back(std::make_unique<boundary_channel<T>>(
                "forward " + std::to_string(b) + "->" + std::to_string(b + 1), caps_[b].forward, n, max_b_,
                targets_per_sample));
            backward_.push_back(std::make_unique<boundary_channel<T>>(
                "backward " + std::to_string(b + 1) + "->" + std::to_string(b), caps_[b].backward, n, max_b_, 0));
        }
    }

    // Checks a step's input; returns the counted targets N of the batch (Loss::count_targets, which checks every
    // target first).
    std::size_t check_step_input(std::span<const T> x, std::span<const std::int32_t> labels,
                                 const optim::hyperparameters<double>& h,
                                 const std::string& who = "pipeprop::sync::pipeline_executor::step: ") const {
        const std::size_t batch = labels.size() / targets_per_sample;
        if (batch == 0) throw std::invalid_argument(who + "empty batch");
        if (labels.size() != batch * targets_per_sample)
            throw std::invalid_argument(who + std::to_string(labels.size()) + " targets, not a multiple of " +
                                        std::to_string(targets_per_sample) + " per sample");
        if (batch > opt_.max_batch)
            throw std::invalid_argument(who + "batch of " + std::to_string(batch) +
                                        " samples exceeds max_batch = " + std::to_string(opt_.max_batch));
        if (x.size() != batch * input_size)
            throw std::invalid_argument(who + "input has " + std::to_string(x.size()) + " values, expected B x " +
                                        std::to_string(input_size) + " = " + std::to_string(batch * input_size));
        stages_.front()->optimizer().check(h);  // every stage's optimizer has the same config
        // with remote stages, the targets are read by the processes of stage 0 (they travel with its forward
        // messages) and of the last stage (N, the gradient's scale) only
        if (!local_.front() && !local_.back()) return 0;
        return Loss::count_targets(labels.data(), batch);
    }

    void check_buffer(std::size_t k) const {
        if (k >= optimizer_buffer_count)
            throw std::out_of_range("pipeprop::sync::schedule_executor: optimizer state buffer " + std::to_string(k) +
                                    " of " + std::to_string(optimizer_buffer_count));
    }

    // L2 norm over all stages' gradient blocks, in double: each stage's share (elements in order), added in stage
    // order (deterministic; the same sum the steps' results report).
    [[nodiscard]] double global_gradient_norm() const {
        double sum = 0;
        for (const auto& st : stages_) sum += runner_type::squared_norm(st->gradient());
        return std::sqrt(sum);
    }

    void run_sequential(const step_plan& pl) {
        auto send = [this](std::size_t to, const boundary_message& msg) { runner_.deliver(to, msg); };
        for (const auto g : pl.order) {
            if (runner_.update_due(g.stage) && runner_.ready(g.stage))  // its update of the previous step
                runner_.run_next(g.stage, send);
            if (runner_.runtime(g.stage).next != g.index || !runner_.ready(g.stage))
                throw std::logic_error("pipeprop::sync::pipeline_executor: global order broken at stage " +
                                       std::to_string(g.stage) + " op " + std::to_string(g.index));
            runner_.run_next(g.stage, send);
        }
        for (std::size_t s = 0; s < ranges_.size(); ++s) runner_.run_ready(s, send);  // the optimizer steps
    }

    static constexpr const char* who = "pipeprop::sync::pipeline_executor";
    template <class Get>
    std::vector<T> gather(Get get) const {
        std::vector<T> all(stack_type::parameter_count);
        gather_network_block<stack_type>(stages_, std::span<T>(all), get, who);
        return all;
    }

    schedule_kind kind_;
    bool two_stage_bp_;
    stack_type stack_{};
    std::vector<layer_range> ranges_;
    options_type opt_;
    std::size_t max_b_ = 1;
    std::vector<std::unique_ptr<step_plan>> plans_;
    std::map<std::size_t, std::unique_ptr<step_plan>> consecutive_plans_;  // by number of steps
    std::vector<channel_capacity> caps_;
    std::vector<std::unique_ptr<stage_type>> stages_;
    std::vector<std::unique_ptr<boundary_channel<T>>> forward_, backward_;
    runner_type runner_{stages_, forward_, backward_};
    graph_runner graph_runner_{*this};
    std::unique_ptr<lane_graph<graph_runner>> graph_;  // after the runner: destroyed before it
    std::optional<stage_inference<stack_type>> eval_;
    std::uint64_t steps_ = 0;
    std::vector<step_result> results_;  // of the last run_plan, one per step
    undo_type undo_{*this};  // step_or_undo: the state before the step (sync/non_finite_undo.hpp)
    // stages in other processes (options::remote)
    std::vector<bool> local_;                  // [p]: the stage runs here (all, without a transport)
    bool remote_stages_current_ = false;       // load_remote_stages since the last step
    std::uint64_t run_ = 0;                    // run_plan calls (the same on every process: messages carry it)
    remote_type remote_{*this};                // the running steps' notes and backlog (sync/remote_stages.hpp)
};

}  // namespace pipeprop::sync
