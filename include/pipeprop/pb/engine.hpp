// pipeprop/pb/engine.hpp: a Pipelined Backpropagation training engine over a runtime list of stages.
//
// PB-paper (Kosson et al., arXiv 2003.11666) §3-4; what it computes: docs/pb-semantics.md. The engine owns the
// network's layers (layer_stack), one stage_state per stage (weights, velocity, gradient, policy state) and one
// executor (sequential reference or concurrent flow graph; identical results). It is driven from the caller's loop:
//
//   pb::engine<net, pb::policy::sc_lwp<>> e(stage_ranges, {.max_batch = 1});
//   e.set_hyperparameters({.learning_rate = 5.14e-5f, .momentum = 0.99671f});
//   for (each micro-batch) for (auto& c : e.push(x, labels, b)) report(c.id, c.loss, c.correct);
//   for (auto& c : e.drain()) report(...);              // end of epoch: every update applied
//   auto r = e.evaluate(test_x, test_labels, n);        // current weights
//
// The static pipelines (pb::pipeline, pb/pipeline.hpp) derive from it. Loss (loss/loss_policy.hpp; default softmax
// cross-entropy) and Optimizer (pb/optimizer.hpp: optim::sgd<T> with every mitigation, optim::adamw<T> with some)
// are policies. After an exception inside a stage the engine is failed and refuses every later call
// (docs/pb-semantics.md §8); its whole-network state accessors are in pb/whole_network_state.hpp.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipeprop/check_policies.hpp"
#include "pipeprop/layer_stack.hpp"
#include "pipeprop/loss/default_loss.hpp"
#include "pipeprop/loss/loss_policy.hpp"
#include "pipeprop/evaluation.hpp"
#include "pipeprop/network_blocks.hpp"
#include "pipeprop/non_finite_loss_error.hpp"
#include "pipeprop/optim/hyperparameters.hpp"
#include "pipeprop/pb/executor.hpp"
#include "pipeprop/pb/make_executor.hpp"
#include "pipeprop/pb/micro_batch.hpp"
#include "pipeprop/pb/optimizer.hpp"
#include "pipeprop/pb/policies.hpp"
#include "pipeprop/pb/stage_state.hpp"
#include "pipeprop/pb/stats.hpp"
#include "pipeprop/pb/whole_network_state.hpp"
#include "pipeprop/pipeline_layout.hpp"
#include "pipeprop/stage_inference.hpp"
#include "pipeprop/stage_program.hpp"

namespace pipeprop::pb {

using pipeprop::check_partition;

/// PB engine for network Net (value type T) under mitigation policy Policy, loss policy Loss and optimizer
/// Optimizer (see the file comment), stages given at run time.
template <network_type Net, mitigation_policy Policy, class T = float,
          class Loss = pipeprop::detail::default_loss_t<Net, T>, class Optimizer = optim::sgd<T>>
class engine : public detail::whole_network_state<engine<Net, Policy, T, Loss, Optimizer>, layer_stack<Net, T>,
                                                  basic_stage_state<Policy, T, Optimizer>, Optimizer, T> {
    static_assert(check_policies<Loss, Optimizer, T, typename layer_stack<Net, T>::output_shape>());
    static_assert(check_pb_optimizer<Policy, Optimizer, T>());

public:
    using network_type = Net;  ///< The network the engine trains (network.hpp): its layers in order.
    using policy_type = Policy;  ///< The mitigation policy of every stage (pb/policies.hpp; PB-paper §4).
    using value_type = T;  ///< The value type of weights, activations and gradients (float or double).
    using loss_type = Loss;  ///< The loss policy over the last stage's output (loss/loss_policy.hpp).
    using optimizer_type = Optimizer;  ///< The update every stage applies (optim::sgd<T> or optim::adamw<T>).
    using stack_type = layer_stack<Net, T>;  ///< The network's layers and their static tables (layer_stack<Net, T>).
    /// One stage's weights, optimizer and policy state (pb/basic_stage_state.hpp: network-free); stage s has delay
    /// D_s = 2 (S - 1 - s).
    using stage_type = basic_stage_state<Policy, T, Optimizer>;
    using options_type = options<Policy>;  ///< The construction options (pb/executor.hpp).
    static constexpr std::size_t input_size = stack_type::activation_size[0];  ///< Per-sample elements of x.
    /// int32 targets per sample: 1 (a class label) or L (a sequence's next tokens).
    static constexpr std::size_t targets_per_sample = Loss::targets_per_sample;
    /// Number of classes, the loss's last logits dimension: class labels lie in [0, classes).
    static constexpr std::size_t classes = stack_type::output_shape::size / Loss::targets_per_sample;

    /// Cuts the network into `stages` (checked by check_partition), initializes the network's parameter block with
    /// layer_stack::init_parameters(options.seed) and slices it into the stages, allocates every buffer and starts
    /// the chosen executor. Throws std::invalid_argument for a bad partition or option (max_batch, push_buffer,
    /// eval_batch must be >= 1; policy parameters).
    engine(std::vector<layer_range> stages, const options_type& opt)
        : engine(checked_programs(stages), opt) {}

    /// As above, with each stage's code given (stage_program.hpp): static_stage_programs<Layout>() for a static
    /// pipeline (pb::pipeline), whose stage passes are instantiated per stage type. Throws as above.
    engine(std::vector<stage_program<stack_type>> programs, const options_type& opt)
        : engine(std::move(programs), opt, std::span<T>{}) {}

    /// Embedding: the engine runs on parameter storage the caller owns, `storage` [stack_type::parameter_count] in the
    /// network's block layout (layer_stack: layers in order, each layer's tensors in parameter_tensors() order). Its
    /// values are the initial weights (options.seed is not used for them); every update writes into it in place, so the
    /// caller (a framework keeping the weights in its own tensors) sees the current weights between calls once the
    /// pipeline is drained. The storage must outlive the engine and must not be written by the caller while
    /// micro-batches are in flight. Velocities and policy state stay inside the engine. Throws std::invalid_argument
    /// for a wrong storage size, and as the constructors above.
    engine(std::vector<layer_range> stages, const options_type& opt, std::span<T> storage)
        : engine(checked_programs(stages), opt, storage) {}
    /// As the constructor above (on the caller's `storage`), with each stage's code given (stage_program.hpp).
    /// Throws as above.
    engine(std::vector<stage_program<stack_type>> programs, const options_type& opt, std::span<T> storage)
        : engine(std::move(programs), opt, storage, stage_bound<std::dynamic_extent>{}) {}

protected:
    /// A compile-time bound on the number of stages (pb::pipeline passes its stage count: lane_plan_for).
    template <std::size_t MaxStages>
    struct stage_bound {};
    /// The constructor above for at most MaxStages stages (checked: std::invalid_argument).
    template <std::size_t MaxStages>
    engine(std::vector<stage_program<stack_type>> programs, const options_type& opt, std::span<T> storage,
           stage_bound<MaxStages>)
        : options_(opt), ranges_(ranges_of(programs)) {
        if (ranges_.size() > MaxStages)
            throw std::invalid_argument("pipeprop::pb::engine: more stages than the pipeline type's " +
                                        std::to_string(MaxStages));
        check_partition(ranges_, stack_type::layer_count, "pipeprop::pb");
        check_cuts_allowed<stack_type>(ranges_);
        if (opt.max_batch == 0) throw std::invalid_argument("pipeprop::pb::engine: max_batch must be >= 1");
        if (opt.push_buffer == 0) throw std::invalid_argument("pipeprop::pb::engine: push_buffer must be >= 1");
        if (opt.eval_batch == 0) throw std::invalid_argument("pipeprop::pb::engine: eval_batch must be >= 1");
        if (!storage.empty() && storage.size() != stack_type::parameter_count)
            throw std::invalid_argument("pipeprop::pb::engine: the caller's parameter storage has " +
                                        std::to_string(storage.size()) + " elements, the network has " +
                                        std::to_string(stack_type::parameter_count) + " parameters");
        aligned_vector<T> block(stack_type::parameter_count);
        if (storage.empty())
            stack_.init_parameters(block, opt.seed);
        else
            std::copy(storage.begin(), storage.end(), block.begin());
        // The concurrent executor's lane plan first: its cost probe allocates every stage's activation slots once
        // more, and freed before the stages allocate theirs it does not add to the peak.
        const lane_plan lanes = opt.executor == executor_kind::concurrent
                                    ? lane_plan_for<Net, Policy, T, MaxStages>(opt, ranges_)
                                    : lane_plan{};
        stages_.reserve(ranges_.size());
        for (std::size_t s = 0; s < ranges_.size(); ++s)
            stages_.emplace_back(stack_, s, ranges_.size(), programs[s], std::span<const T>(block), opt.policy,
                                 storage, opt.adamw);
        if constexpr (Policy::fixed_momentum) hyper_.momentum = static_cast<T>(Policy::momentum);
        executor_ = make_executor<Policy, T, Loss, Optimizer>(stack_, stages_, opt, lanes);
    }

public:
    /// The dynamic programs of runtime ranges, after the partition checks (a bad range must not reach the stack).
    static std::vector<stage_program<stack_type>> checked_programs(const std::vector<layer_range>& stages) {
        check_partition(stages, stack_type::layer_count, "pipeprop::pb");
        return dynamic_stage_programs<stack_type>(stages);
    }

    engine(const engine&) = delete;
    engine& operator=(const engine&) = delete;

    /// S, the number of stages.
    [[nodiscard]] std::size_t number_of_stages() const noexcept { return ranges_.size(); }
    /// Stage s's layers.
    [[nodiscard]] layer_range stage_range(std::size_t s) const { return ranges_.at(s); }
    /// D_s = 2 (S - 1 - s).
    [[nodiscard]] std::size_t stage_delay(std::size_t s) const { return stages_.at(s).delay(); }
    /// The stage cut: [S] layer ranges, stage s runs stage_ranges()[s] (= stage_range(s)).
    [[nodiscard]] const std::vector<layer_range>& stage_ranges() const noexcept { return ranges_; }
    /// The options the engine was built with (unchanged since).
    [[nodiscard]] const options_type& engine_options() const noexcept { return options_; }
    /// The executor running the stages, options::executor: sequential (the reference) or concurrent.
    [[nodiscard]] executor_kind executor_in_use() const noexcept { return executor_->kind(); }
    /// The network's layers (layer_stack): shapes, sizes and layer configuration; the weights live in the stages.
    [[nodiscard]] const stack_type& stack() const noexcept { return stack_; }

    /// Hyperparameters for the micro-batches pushed from now on (each micro-batch keeps the values current at its
    /// push). Throws std::invalid_argument for values the policy and optimizer do not accept (check_pb_hyperparameters,
    /// pb/optimizer.hpp).
    void set_hyperparameters(const optim::hyperparameters<T>& h) {
        check_pb_hyperparameters<Policy, Optimizer>(h);
        hyper_ = h;
    }
    /// The hyperparameters the next push() gives its micro-batch: those last set, optim::hyperparameters' defaults
    /// before any set_hyperparameters (with the policy's momentum when it is a compile-time constant).
    [[nodiscard]] const optim::hyperparameters<T>& current_hyperparameters() const noexcept { return hyper_; }

    /// Pushes micro-batch n = micro_batches_pushed(): x [b, input...] (b * input_size values), int32 targets
    /// [b, targets_per_sample] (labels in [0, classes); a token loss's targets as it defines them), 1 <= b <=
    /// max_batch (a final partial micro-batch is just a smaller b). The data are copied
    /// before push returns. Returns the micro-batches whose backward completed at every stage during this call
    /// (sequential executor: exactly this one; concurrent: those that completed while the graph ran, which it does
    /// every push_buffer pushes), valid until the next call. Throws std::invalid_argument (sizes, target range, b)
    /// naming the micro-batch and sample, before anything is changed; pipeprop::non_finite_loss_error (after the
    /// call's work is done) when a completed micro-batch's loss is NaN or infinite: PB has then already applied that
    /// micro-batch's update at every stage, so the weights are not usable any more (stop; do not save them);
    /// pipeprop::stage_error when a layer throws inside a stage, std::logic_error once the engine failed
    /// (docs/pb-semantics.md §8). With options::remote, on a process that does not run stage 0, x and the targets
    /// are not read (only their sizes are checked): every process pushes the same b in the same order.
    std::span<const completed_micro_batch<T>> push(std::span<const T> x, std::span<const std::int32_t> labels,
                                                   std::size_t b) {
        require_usable("push");
        // Messages are built only on error: push allocates nothing on the good path.
        auto fail = [&](const std::string& why) {
            throw std::invalid_argument("pipeprop::pb::engine::push (micro-batch " + std::to_string(next_id_) +
                                        "): " + why);
        };
        if (b == 0 || b > options_.max_batch)
            fail("b = " + std::to_string(b) + " is outside [1, max_batch = " + std::to_string(options_.max_batch) +
                 "]");
        if (x.size() != b * input_size)
            fail("x has " + std::to_string(x.size()) + " values, expected b * " + std::to_string(input_size) + " = " +
                 std::to_string(b * input_size));
        if (labels.size() != b * targets_per_sample)
            fail("targets has " + std::to_string(labels.size()) + " entries, expected b * " +
                 std::to_string(targets_per_sample) + " = " + std::to_string(b * targets_per_sample));
        try {
            // N = 0 (every target ignored) is allowed, as in the trainers: loss 0 and a zero gradient. Checked where
            // the targets are read: not on a process whose stage 0 runs elsewhere (options::remote).
            if (options_.remote == nullptr || options_.remote->is_local(0)) (void)Loss::count_targets(labels.data(), b);
        } catch (const std::out_of_range& e) {
            fail(e.what());
        }
        remote_stages_current_ = false;
        micro_batch_info<T> mb;
        mb.id = next_id_;
        mb.batch = b;
        mb.first_sample = samples_pushed_;
        mb.hyper = hyper_;
        const auto t0 = std::chrono::steady_clock::now();
        std::span<const completed_micro_batch<T>> done;
        try {
            done = executor_->push(x.data(), labels.data(), mb);
        } catch (...) {
            record_failure();
            throw;
        }
        wall_ += std::chrono::steady_clock::now() - t0;
        ++next_id_;
        samples_pushed_ += b;
        account(done);
        return done;
    }

    /// Completes every micro-batch in flight (end of an epoch, before evaluation or a checkpoint); returns those
    /// completed during this call. The next micro-batch starts a new pipeline fill (n0 := its index). Throws
    /// pipeprop::non_finite_loss_error, pipeprop::stage_error and std::logic_error like push().
    std::span<const completed_micro_batch<T>> drain() {
        require_usable("drain");
        const auto t0 = std::chrono::steady_clock::now();
        std::span<const completed_micro_batch<T>> done;
        try {
            done = executor_->drain();
        } catch (...) {
            record_failure();
            throw;
        }
        wall_ += std::chrono::steady_clock::now() - t0;
        account(done);
        return done;
    }

    /// Micro-batches pushed and not yet completed.
    [[nodiscard]] std::size_t in_flight() const noexcept { return executor_->in_flight(); }
    /// Micro-batches pushed since construction, counting from the value a checkpoint restored (restore_counters):
    /// the id n the next push gives its micro-batch.
    [[nodiscard]] std::size_t micro_batches_pushed() const noexcept { return next_id_; }
    /// Samples pushed (the sum of the pushed micro-batches' b), counted like micro_batches_pushed().
    [[nodiscard]] std::size_t samples_pushed() const noexcept { return samples_pushed_; }

    /// Mean loss (per counted target) and accuracy of the CURRENT weights (w, never predicted or stashed ones) over n
    /// samples: x [n, input...], targets [n, targets_per_sample], processed in chunks of eval_batch. Throws
    /// std::logic_error when micro-batches are in flight (call drain() first: evaluation must see all updates) and
    /// std::invalid_argument for sizes or targets out of range. Allocates its buffers on first use.
    [[nodiscard]] evaluation evaluate(std::span<const T> x, std::span<const std::int32_t> labels, std::size_t n) {
        require_usable("evaluate");
        if (options_.remote != nullptr && !remote_stages_current_)
            throw std::logic_error("pipeprop::pb::engine::evaluate: other processes run some of the stages "
                                   "(options::remote), whose weights this process does not have (load_remote_stages "
                                   "after a drain gives them)");
        if (in_flight() != 0)
            throw std::logic_error("pipeprop::pb::engine::evaluate: " + std::to_string(in_flight()) +
                                   " micro-batches are in flight; call drain() first so evaluation sees all updates");
        if (x.size() != n * input_size || labels.size() != n * targets_per_sample)
            throw std::invalid_argument("pipeprop::pb::engine::evaluate: expected " + std::to_string(n * input_size) +
                                        " input values and " + std::to_string(n * targets_per_sample) +
                                        " targets, got " + std::to_string(x.size()) + " and " +
                                        std::to_string(labels.size()));
        try {
            (void)Loss::count_targets(labels.data(), n);
        } catch (const std::out_of_range& e) {
            throw std::invalid_argument(std::string("pipeprop::pb::engine::evaluate: ") + e.what());
        }
        if (!eval_) eval_.emplace(stack_, ranges_, options_.eval_batch);
        if (n == 0) return {};
        return evaluate_stages<loss_type>(*eval_, stack_, stages_, [](stage_type& st) { return st.weights(); },
                                          x.data(), labels.data(), n, "pipeprop::pb::engine::evaluate");
    }

    /// Per-stage and per-run figures (docs/pb-semantics.md §5).
    [[nodiscard]] run_stats stats() const {
        run_stats r;
        r.executor = std::string(to_string(executor_->kind()));
        r.policy = std::string(Policy::name);
        r.micro_batches = completed_micro_batches_;
        r.samples = completed_samples_;
        r.wall_seconds = std::chrono::duration<double>(wall_).count();
        r.samples_per_second = r.wall_seconds > 0 ? static_cast<double>(r.samples) / r.wall_seconds : 0.0;
        r.stages.resize(stages_.size());
        for (std::size_t s = 0; s < stages_.size(); ++s) {
            const stage_type& st = stages_[s];
            stage_stats& o = r.stages[s];
            o.stage = s;
            o.layers = st.range();
            o.delay = st.delay();
            o.parameters = st.parameter_count();
            o.weight_bytes = st.weight_bytes();
            o.weight_copies = st.weight_copies();
            o.weight_norm = l2_norm(st.weights());
            o.velocity_norm = l2_norm(st.velocity());
            o.observed_delay_min = st.observed_delay_min();
            o.observed_delay_max = st.observed_delay_max();
            o.backward_count = st.backward_count();
            o.full_delay_count = st.full_delay_count();
        }
        executor_->fill_stats(r.stages);
        r.load = executor_->load_adaptation();
        r.lanes = executor_->lane_rebalance();
        return r;
    }

    /// True once an exception inside a stage interrupted the pipeline (docs/pb-semantics.md §8).
    [[nodiscard]] bool failed() const noexcept { return !failure_.empty(); }
    /// Throws std::logic_error naming `what` and the first failure when failed().
    void require_usable(const char* what) const {
        if (!failure_.empty()) [[unlikely]]
            throw std::logic_error(std::string("pipeprop::pb::engine::") + what + ": the engine failed earlier (" +
                                   failure_ + "); its state is that of an interrupted tick and it refuses every "
                                   "call: make a new engine (and load the last checkpoint to continue)");
    }

private:
    friend detail::whole_network_state<engine, stack_type, stage_type, Optimizer, T>;  // pb/whole_network_state.hpp

    void record_failure() {
        try {
            throw;
        } catch (const std::exception& e) {
            failure_ = e.what();
        } catch (...) {
            failure_ = "an exception not derived from std::exception";
        }
        if (failure_.empty()) failure_ = "an exception with an empty message";
    }
    void require_drained(const char* what) const {
        if (in_flight() != 0)
            throw std::logic_error(std::string("pipeprop::pb::engine::") + what + ": " + std::to_string(in_flight()) +
                                   " micro-batches are in flight; call drain() first");
    }
    /// Counts the completed micro-batches, then throws non_finite_loss_error for the first one whose loss is NaN or
    /// infinite (every counter is up to date when it throws).
    void account(std::span<const completed_micro_batch<T>> done) {
        completed_micro_batches_ += done.size();
        for (const auto& c : done) completed_samples_ += c.batch;
        for (const auto& c : done)
            if (!std::isfinite(c.loss)) [[unlikely]]
                throw non_finite_loss_error(
                    "pipeprop::pb::engine: the loss of micro-batch " + std::to_string(c.id) + " became " +
                        (std::isnan(c.loss) ? "NaN" : "infinite") + " (" + std::to_string(samples_pushed_) +
                        " samples pushed, learning rate " + std::to_string(hyper_.learning_rate) +
                        "); its update and those of later micro-batches are applied, the weights are not usable. "
                        "Lower the learning rate (scale it from a batch B to the micro-batch size b with "
                        "optim::scale_hyperparameters) or check the data.",
                    c.id, samples_pushed_);
    }

    options_type options_;
    std::vector<layer_range> ranges_;
    stack_type stack_{};
    std::vector<stage_type> stages_;
    optim::hyperparameters<T> hyper_{};
    std::unique_ptr<executor<T>> executor_;
    std::optional<stage_inference<stack_type>> eval_;
    std::size_t next_id_ = 0;
    std::size_t samples_pushed_ = 0;
    std::size_t completed_micro_batches_ = 0;
    std::size_t completed_samples_ = 0;
    std::chrono::steady_clock::duration wall_{};
    std::string failure_;  // what() of the exception that made the engine fail; empty while usable
    bool remote_stages_current_ = false;  // load_remote_stages since the last push (options::remote)
};

}  // namespace pipeprop::pb
