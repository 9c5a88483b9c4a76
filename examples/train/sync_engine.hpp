// examples/train/sync_engine.hpp: the engine of --mode sync (train/mode_sync.hpp): the library's synchronous trainer
// (pipeprop::sync::trainer) with what the main program adds: the spans of the last full step for --trace and, with
// --transport mpi, the collective evaluation and the checkpoint manifest's ranks.
#pragma once

#include <pipeprop/evaluation.hpp>
#include <pipeprop/loss/default_loss.hpp>
#include <pipeprop/optim/lr_schedule.hpp>
#include <pipeprop/optim/sgd.hpp>
#include <pipeprop/pipeline_layout.hpp>
#include <pipeprop/sync/op_span.hpp>
#include <pipeprop/sync/schedule.hpp>
#include <pipeprop/sync/trainer.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "train/cluster.hpp"
#include "train/rank_evaluation.hpp"

namespace train {

namespace ps = pipeprop::sync;

/// The synchronous trainer of the library (pipeprop::sync::trainer: the pipeprop::trainer contract,
/// training_loop.hpp; step_or_undo, evaluate, sync::save_state / load_state, so a checkpoint moves freely between
/// --mode sgd and --mode sync) with what the main program adds: the spans of the last full step for --trace and, with
/// --transport mpi, the collective evaluation and the checkpoint manifest's ranks. The schedule kind and 2BP flag are
/// run-time values (one compiled executor for every schedule).
template <class Net, class Loss = pipeprop::detail::default_loss_t<Net, float>,
          class Optimizer = pipeprop::optim::sgd<float>>
class sync_engine : public ps::trainer<Net, float, Loss, Optimizer> {
    using base = ps::trainer<Net, float, Loss, Optimizer>;

public:
    using typename base::executor_type;
    using typename base::stack_type;
    using base::targets_per_sample;

    /// ranks, rank_of: --transport mpi (opt.remote is then this rank's transport, stage s on rank rank_of[s]).
    sync_engine(ps::schedule_kind kind, bool two_stage_bp, std::vector<pipeprop::layer_range> stages,
                const typename executor_type::options_type& opt, pipeprop::optim::lr_schedule schedule,
                double momentum, double weight_decay, bool keep_spans, cluster* ranks = nullptr,
                std::vector<int> rank_of = {})
        : base(kind, two_stage_bp, std::move(stages), opt, schedule, momentum, weight_decay),
          keep_spans_(keep_spans),
          ranks_(ranks),
          rank_of_(std::move(rank_of)) {}

    /// One step (pipeprop::sync::trainer::train_batch); keeps the spans of a step of all m micro-batches.
    double train_batch(const float* x, const std::int32_t* labels, std::size_t b) {
        const double loss = base::train_batch(x, labels, b);
        auto& ex = this->executor();
        if (keep_spans_ && ex.options().micro_batches <= b) last_full_spans_ = ex.spans();
        return loss;
    }

    /// With --transport mpi collective (train/rank_evaluation.hpp): rank 0 evaluates with every rank's stages.
    pipeprop::evaluation evaluate(const float* x, const std::int32_t* labels, std::size_t n) {
        if (ranks_ == nullptr) return base::evaluate(x, labels, n);
        auto& ex = this->executor();
        return evaluate_on_rank0<stack_type>(
            *ranks_, ex.ranges(), rank_of_, [&](std::size_t s) { return ex.stage_at(s).parameters(); },
            [&](std::size_t s) { return ex.stage_at(s).state(); },
            [&](std::span<const float> w, std::span<const float> state) {
                ex.load_remote_stages(w, state);
                return base::evaluate(x, labels, n);
            });
    }
    /// --transport mpi: rank r's stages, for the checkpoint manifest (train/rank_checkpoints.hpp).
    [[nodiscard]] std::vector<std::string> stages_by_rank() const {
        return train::stages_by_rank(rank_of_, ranks_->size());
    }
    /// --transport mpi: every stage's layers and rank (train/rank_evaluation.hpp), kept in each rank's checkpoint.
    [[nodiscard]] std::string rank_layout() const { return rank_layout_text(this->executor().ranges(), rank_of_); }

    /// Spans of the last step that ran all m micro-batches (empty unless keep_spans).
    [[nodiscard]] const std::vector<ps::op_span>& last_full_spans() const noexcept { return last_full_spans_; }

private:
    bool keep_spans_;
    std::vector<ps::op_span> last_full_spans_;
    cluster* ranks_ = nullptr;
    std::vector<int> rank_of_;
};

}  // namespace train
