// pipeprop/sync/schedule_executor.hpp: the synchronous pipeline executor: one optimizer step over the m micro-batches
// of a batch B, every stage running exactly the op list of the schedule generator (sync/schedule.hpp), with 2BP
// (2BP-paper, Rae et al. arXiv 2405.18047, §3) on or off; k steps back to back without a barrier
// (consecutive_steps).
//
// What a step computes (the mean-loss gradient over the whole batch, bit-identical across schedules and executors for
// the same m), short batches, activation memory, the concurrent and sequential executors, failures, stages in other
// processes and global gradient clipping: docs/schedules.md §3. Its parts: the op interpreter
// (sync/op_runner.hpp), the plans and buffer sizes (sync/step_plan_cache.hpp), the whole-network state accessors
// (sync/whole_network_state.hpp), the non-finite-loss policy (sync/non_finite_undo.hpp), the exchange with other
// processes (sync/remote_stages.hpp, which a program that uses them includes; the seam: sync/remote_part.hpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "pipeprop/check_policies.hpp"
#include "pipeprop/boundary_channel.hpp"
#include "pipeprop/evaluation.hpp"
#include "pipeprop/lane_graph.hpp"
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
#include "pipeprop/sync/step_input.hpp"
#include "pipeprop/sync/step_plan_cache.hpp"
#include "pipeprop/sync/step_results.hpp"
#include "pipeprop/sync/whole_network_state.hpp"
#include "pipeprop/sync/executor_options.hpp"
#include "pipeprop/sync/non_finite_undo.hpp"
#include "pipeprop/sync/remote_part.hpp"
#include "pipeprop/sync/stage.hpp"

namespace pipeprop::sync {

/// The synchronous pipeline executor over layer_stack<Net, T> cut into stages, running the op lists of schedule
/// `kind` with 2BP on or off (both chosen at construction: the op lists are data, so every schedule runs the same
/// compiled code). Loss and Optimizer are policies (loss/loss_policy.hpp, optim/optimizer_policy.hpp): by default
/// softmax cross-entropy over the network output and momentum SGD; e.g. token_cross_entropy and optim::adamw for a
/// transformer. Not copyable or movable (its flow graph refers to it). Semantics: docs/schedules.md §3;
/// pipeline_executor (sync/executor.hpp) is the same executor with the schedule fixed by template arguments.
template <network_type Net, class T = float, class Loss = pipeprop::detail::default_loss_t<Net, T>,
          class Optimizer = optim::sgd<T>>
class schedule_executor
    : public detail::whole_network_state<schedule_executor<Net, T, Loss, Optimizer>, layer_stack<Net, T>,
                                         stage<Net, T, Optimizer>, Optimizer, T>,
      public detail::non_finite_steps<schedule_executor<Net, T, Loss, Optimizer>, T> {
public:
    using stack_type = layer_stack<Net, T>;  ///< The network's layers (layer_stack<Net, T>).
    using stage_type = stage<Net, T, Optimizer>;  ///< One stage: parameters, gradient, optimizer state, slots.
    using value_type = T;  ///< The value type of parameters, activations and gradients (float or double).
    using loss_type = Loss;  ///< The loss policy the last stage applies (loss/loss_policy.hpp).
    using optimizer_type = Optimizer;  ///< The optimizer policy of every stage (optim/optimizer_policy.hpp).
    /// The construction options (sync/executor_options.hpp), with the optimizer's fixed configuration.
    using options_type = basic_executor_options<typename Optimizer::config_type>;
    static_assert(check_policies<Loss, Optimizer, T, typename stack_type::output_shape>());
    static constexpr std::size_t input_size = stack_type::input_shape::size;  ///< Per-sample elements of x.
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
        detail::check_executor_options(opt_);
        const std::size_t p = ranges_.size();
        max_b_ = (opt_.max_batch + opt_.micro_batches - 1) / opt_.micro_batches;
        // buffers for every plan a step can run (step_plan_cache::build)
        const std::vector<std::size_t> slots = plans_.build(kind_, two_stage_bp_, p, opt_.micro_batches, opt_.max_batch,
                                                            opt_.max_consecutive_steps, opt_.chunks);
        const step_plan& full = plans_.full();
        std::vector<T> w;  // the initial weights, unless the caller's storage holds them
        if (storage.empty()) {
            w.resize(stack_type::parameter_count);
            stack_.init_parameters(w, opt_.seed);
        }
        for (std::size_t s = 0; s < p; ++s)
            stages_.push_back(std::make_unique<stage_type>(stack_, s, programs[s], max_b_, slots[s],
                                                           opt_.optimizer, targets_per_sample,
                                                           std::span<const T>(w), storage));
        plans_.buffers_allocated(activation_slots());
        make_channels();
        // one lane per device: per stage, or the devices of a virtual-stage schedule (their stages on one node)
        std::vector<std::size_t> lane_of(p);
        for (std::size_t s = 0; s < p; ++s) lane_of[s] = full.sc.device_of_stage(s);
        local_.assign(p, true);
        if (opt_.remote != nullptr) {  // the exchange (sync/remote_stages.hpp) says which stages run here
            remote_ = pipeprop::detail::make_remote_part<detail::remote_part<T>>(remote_host_,
                                                                                 "pipeprop/sync/remote_stages.hpp");
            local_ = remote_->setup(lane_of, opt_.executor, opt_.max_gradient_norm,
                                    lane_graph<graph_runner>::remote_lane);
        }
        graph_ = std::make_unique<lane_graph<graph_runner>>(graph_runner_,
                                                            typename lane_graph<graph_runner>::lane_map{lane_of});
    }

public:
    schedule_executor(const schedule_executor&) = delete;
    schedule_executor& operator=(const schedule_executor&) = delete;

    /// One optimizer step on the batch x [B, input_size] (row-major) with targets [B, targets_per_sample] and the
    /// step's hyperparameters h (every stage's update uses them). Throws, before any work: std::invalid_argument when
    /// B == 0, B > max_batch, x.size() != B * input_size or the optimizer rejects h (Optimizer::check, naming the
    /// field); std::out_of_range for a target out of range (naming the sample). During the work:
    /// pipeprop::stage_error when a layer or the loss throws inside a stage (stage, micro-batch, phase and step named;
    /// the original exception nested), std::logic_error on a broken invariant; the executor is then usable again, but
    /// the state is that of an interrupted step: restore the parameters and optimizer state from before it
    /// (docs/schedules.md §3, failures). A NaN or infinite loss is returned in step_result::loss with the update
    /// applied; step_or_undo undoes it and throws non_finite_loss_error.
    step_result step(std::span<const T> x, std::span<const std::int32_t> labels,
                     const optim::hyperparameters<double>& h) {
        const std::size_t batch = labels.size() / targets_per_sample;
        const input_type in{x.data(), labels.data(), check_step_input(x, labels, h), h};
        run_plan(plans_.plan_for(plans_.micro_batches_for(batch)), std::span<const input_type>(&in, 1), batch);
        return results_.front();
    }

    /// One batch of consecutive_steps: x [B, input_size] (row-major), targets [B, targets_per_sample] and the
    /// step's hyperparameters.
    using batch_view = step_batch<T>;

    /// k = batches.size() optimizer steps, one per batch in order, run back to back without a barrier between them
    /// (sync/schedule.hpp consecutive_steps); every result, weight, optimizer state and running-state bit equals that
    /// of k step() calls on the same batches. Requires 1 <= k <= options().max_consecutive_steps, every batch of the
    /// same size B >= micro_batches and max_gradient_norm == 0 (clipping is a barrier). Throws std::invalid_argument
    /// for any of these (naming it) and as step() for each batch's input, all before any work; during the work as
    /// step() (restore the state from before the call).
    std::vector<step_result> consecutive_steps(std::span<const batch_view> batches) {
        const std::vector<input_type> in = detail::consecutive_step_inputs<input_type>(
            batches, targets_per_sample, opt_, "pipeprop::sync::schedule_executor::consecutive_steps: ",
            [this](const batch_view& bv, const std::string& who) {
                return check_step_input(bv.x, bv.labels, bv.h, who);
            });
        const std::size_t k = in.size(), batch = batches[0].labels.size() / targets_per_sample;
        run_plan(k == 1 ? plans_.plan_for(opt_.micro_batches) : plans_.consecutive_plan(k), in, batch);
        return results_;
    }

    /// Mean loss and accuracy of the current parameters over n samples x [n, input_size], targets
    /// [n, targets_per_sample]: inference through the stages in chunks of max_batch (evaluate_stages, running state
    /// read, never updated).
    /// Throws std::invalid_argument for n == 0 or sizes that do not match, std::out_of_range for a label outside
    /// [0, classes). Allocates its buffers on first use. Not during a step.
    [[nodiscard]] evaluation evaluate(std::span<const T> x, std::span<const std::int32_t> labels) {
        const std::size_t n = detail::check_evaluation_input(x, labels, input_size, targets_per_sample,
                                                             "pipeprop::sync::schedule_executor::evaluate: ");
        if (opt_.remote != nullptr && !remote_stages_current_)
            throw std::logic_error("pipeprop::sync::schedule_executor::evaluate: the stages of other processes "
                                   "(options::remote) are not here (load_remote_stages gives them)");
        if (!eval_) eval_.emplace(stack_, ranges_, opt_.max_batch);
        return evaluate_stages<Loss>(*eval_, stack_, stages_, [](const stage_type& st) { return st.parameters(); },
                                     x.data(), labels.data(), n, "pipeprop::sync::schedule_executor::evaluate");
    }

    /// Number of stages p.
    [[nodiscard]] std::size_t stage_count() const noexcept { return ranges_.size(); }
    /// The stage cut: stage s runs layers ranges()[s].
    [[nodiscard]] const std::vector<layer_range>& ranges() const noexcept { return ranges_; }
    ///@{
    /// Stage s (its parameters, gradient, optimizer state, slots). Throws std::out_of_range for s >= p.
    /// Modifying a stage while a step runs is undefined.
    [[nodiscard]] const stage_type& stage_at(std::size_t s) const { return *stages_.at(s); }
    [[nodiscard]] stage_type& stage_at(std::size_t s) { return *stages_.at(s); }
    ///@}
    /// The options the executor was built with.
    [[nodiscard]] const options_type& options() const noexcept { return opt_; }
    ///@{
    /// The schedule kind and whether 2BP splits the backward into backward-p1 and -p2 (2BP-paper §3).
    [[nodiscard]] schedule_kind kind() const noexcept { return kind_; }
    [[nodiscard]] bool two_stage_bp() const noexcept { return two_stage_bp_; }
    ///@}
    /// The schedule the executor runs for full batches (m micro-batches).
    [[nodiscard]] const schedule& current_schedule() const { return plans_.full().sc; }
    /// Activation slots per stage (= the schedule's peak in-flight micro-batches per stage).
    [[nodiscard]] std::vector<std::size_t> activation_slots() const {
        std::vector<std::size_t> n;
        for (const auto& st : stages_) n.push_back(st->slots());
        return n;
    }
    /// Capacities of the boundary channels (messages), per boundary.
    [[nodiscard]] const std::vector<channel_capacity>& channel_sizes() const noexcept {
        return plans_.channel_sizes();
    }
    /// Micro-batch size for which the buffers are allocated: ceil(max_batch / m).
    [[nodiscard]] std::size_t max_micro_batch() const noexcept { return max_b_; }
    /// Optimizer steps taken.
    [[nodiscard]] std::uint64_t steps() const noexcept { return steps_; }
    /// Sets the step counter (a resumed run: sync::load_state). Not during a step.
    void set_steps(std::uint64_t n) noexcept { steps_ = n; }

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
    using remote_host_type = detail::remote_host_of<schedule_executor, T>;
    friend remote_host_type;  // what the exchange with other processes (sync/remote_part.hpp) reads of the state below
    using state_type = detail::whole_network_state<schedule_executor, stack_type, stage_type, Optimizer, T>;
    friend state_type;  // the whole-network state accessors (sync/whole_network_state.hpp)
    friend detail::non_finite_steps<schedule_executor, T>;  // the non-finite-loss policy (sync/non_finite_undo.hpp)
    friend detail::non_finite_undo<schedule_executor, T>;

    // The lane graph's runner: the op interpreter, and the transport for messages to other processes.
    struct graph_runner {
        schedule_executor& ex;
        void deliver(std::size_t s, const boundary_message& m) { ex.runner_.deliver(s, m); }
        [[nodiscard]] bool ready(std::size_t s) const { return ex.runner_.ready(s); }
        template <class Send>
        void run_next(std::size_t s, Send& send) {
            ex.runner_.run_next(s, send);
        }
        void send_remote(std::size_t to, const boundary_message& m) { ex.remote_->send_remote(to, m); }
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
        if (opt_.remote != nullptr) remote_->begin_steps(steps_, in.size(), m);
        const auto t0 = clock::now();
        try {
            if (opt_.executor == executor_kind::concurrent) {
                if (opt_.remote != nullptr) remote_->deliver_backlog();
                graph_->wake_all();
                graph_->wait();
                if (opt_.remote != nullptr) remote_->run_with_remote();
            } else {
                runner_.run_in_global_order(pl);
            }
            if (clipping) {  // global clipping: every stage's p2 is done, then all update
                const double norm = detail::global_gradient_norm(stages_, &runner_type::squared_norm);
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
                remote_->clear_backlog();
            }
            graph_->reset();
            make_channels();
            runner_.roll_back_step_counts();
            throw;
        }
        const double seconds = std::chrono::duration<double>(clock::now() - t0).count();
        runner_.check_finished(local_);
        steps_ += in.size();
        detail::reduce_step_results(results_, in, batch, m, seconds, local_.back(),
                                    [this](std::size_t g) -> const loss_totals& {
                                        return remote_ != nullptr ? remote_->totals_of(g)
                                                                  : runner_.runtimes().back().totals[g];
                                    },
                                    runner_.runtimes());
    }

    void make_channels() {
        const std::vector<channel_capacity>& caps = plans_.channel_sizes();
        forward_.clear();
        backward_.clear();
        for (std::size_t b = 0; b + 1 < ranges_.size(); ++b) {
            const std::size_t n = stack_type::activation_size[ranges_[b].end];
            forward_.push_back(std::make_unique<boundary_channel<T>>(
                "forward " + std::to_string(b) + "->" + std::to_string(b + 1), caps[b].forward, n, max_b_,
                targets_per_sample));
            backward_.push_back(std::make_unique<boundary_channel<T>>(
                "backward " + std::to_string(b + 1) + "->" + std::to_string(b), caps[b].backward, n, max_b_, 0));
        }
    }

    // Checks a step's input (sync/step_input.hpp); returns the counted targets N of the batch.
    std::size_t check_step_input(std::span<const T> x, std::span<const std::int32_t> labels,
                                 const optim::hyperparameters<double>& h,
                                 const std::string& who = "pipeprop::sync::pipeline_executor::step: ") const {
        // every stage's optimizer has the same config; with remote stages, the targets are read by the processes of
        // stage 0 (they travel with its forward messages) and of the last stage (N, the gradient's scale) only
        return detail::check_step_input<Loss>(x, labels, h, input_size, opt_.max_batch, stages_.front()->optimizer(),
                                              local_.front() || local_.back(), who);
    }

    static constexpr const char* who = "pipeprop::sync::pipeline_executor";

    schedule_kind kind_;
    bool two_stage_bp_;
    stack_type stack_{};
    std::vector<layer_range> ranges_;
    options_type opt_;
    std::size_t max_b_ = 1;
    detail::step_plan_cache plans_;  // the plans of every step this executor can run, and its buffer sizes
    std::vector<std::unique_ptr<stage_type>> stages_;
    std::vector<std::unique_ptr<boundary_channel<T>>> forward_, backward_;
    runner_type runner_{stages_, forward_, backward_};
    graph_runner graph_runner_{*this};
    std::unique_ptr<lane_graph<graph_runner>> graph_;  // after the runner: destroyed before it
    std::optional<stage_inference<stack_type>> eval_;
    std::uint64_t steps_ = 0;
    std::vector<step_result> results_;  // of the last run_plan, one per step
    // stages in other processes (options::remote)
    std::vector<bool> local_;                  // [p]: the stage runs here (all, without a transport)
    bool remote_stages_current_ = false;       // load_remote_stages since the last step
    std::uint64_t run_ = 0;                    // run_plan calls (the same on every process: messages carry it)
    remote_host_type remote_host_{*this};
    std::unique_ptr<detail::remote_part<T>> remote_;  // with a transport: the exchange (sync/remote_stages.hpp)
};

}  // namespace pipeprop::sync
