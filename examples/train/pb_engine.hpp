// examples/train/pb_engine.hpp: the main program's --mode pb trainer: pipeprop::pb::trainer with the epoch's exact
// mean loss, and with --transport mpi the collective evaluation on rank 0 and the checkpoint manifest's ranks.
#pragma once

#include <pipeprop/pb/trainer.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "train/cluster.hpp"
#include "train/rank_evaluation.hpp"

namespace train {

/// The PB trainer of the library (pipeprop::pb::trainer: the pipeprop::trainer contract, training_loop.hpp) with
/// what the main program adds: the epoch's exact mean loss per counted target (end_of_epoch drains; the loss of a PB
/// micro-batch is known when its backward completes, up to push_buffer + 2 S micro-batches after its push with the
/// concurrent executor) and, with --transport mpi, the collective evaluation and the checkpoint manifest's ranks.
template <class Net, class Policy, class Loss = pipeprop::detail::default_loss_t<Net, float>,
          class Optimizer = pipeprop::optim::sgd<float>>
class pb_engine : public pipeprop::pb::trainer<Net, Policy, float, Loss, Optimizer> {
    using base = pipeprop::pb::trainer<Net, Policy, float, Loss, Optimizer>;

public:
    using pipe_type = typename base::engine_type;
    using typename base::programs_type;
    using base::input_size;
    using base::targets_per_sample;

    /// programs: the stages' code (pb_stage_programs: static for --stages layer / fine / fine-own,
    /// dynamic for split points).
    /// ranks: --transport mpi (opt.remote is then this rank's transport), else nullptr.
    pb_engine(programs_type programs, const pipeprop::pb::options<Policy>& opt, pipeprop::optim::lr_schedule schedule,
              double momentum, double weight_decay, cluster* ranks = nullptr)
        : base(std::move(programs), opt, schedule, momentum, weight_decay), ranks_(ranks) {}

    /// Drains and keeps the epoch's mean loss per counted target over all of its micro-batches; returns the drained
    /// micro-batches' losses (pipeprop::trainer's drain).
    double end_of_epoch() {
        const double drained = this->drain();
        const pipeprop::pb::completed_losses& now = this->completed();
        const std::uint64_t targets = now.targets - epoch_start_.targets;
        last_epoch_loss_ =
            targets > 0 ? (now.loss_times_targets - epoch_start_.loss_times_targets) / static_cast<double>(targets)
                        : 0.0;
        epoch_start_ = now;
        return drained;
    }
    /// With --transport mpi collective: every rank's own stages (weights, running state) are gathered on rank 0,
    /// which evaluates its n samples (the other ranks pass none) and sends the result to every rank
    /// (train/rank_evaluation.hpp).
    pipeprop::evaluation evaluate(const float* x, const std::int32_t* labels, std::size_t n) {
        if (ranks_ == nullptr) return base::evaluate(x, labels, n);
        auto& pipe = pipeline();
        return evaluate_on_rank0<typename pipe_type::stack_type>(
            *ranks_, pipe.stage_ranges(), rank_of(), [&](std::size_t s) { return pipe.stages()[s].weights(); },
            [&](std::size_t s) { return pipe.stages()[s].state(); },
            [&](std::span<const float> w, std::span<const float> state) {
                pipe.load_remote_stages(w, state);
                return base::evaluate(x, labels, n);
            });
    }
    /// --transport mpi: rank r's stages, for the checkpoint manifest (train/rank_checkpoints.hpp).
    [[nodiscard]] std::vector<std::string> stages_by_rank() const {
        return train::stages_by_rank(rank_of(), ranks_->size());
    }
    /// --transport mpi: every stage's layers and rank (train/rank_evaluation.hpp), kept in each rank's checkpoint.
    [[nodiscard]] std::string rank_layout() const { return rank_layout_text(pipeline().stage_ranges(), rank_of()); }
    /// Samples whose loss is known (their micro-batch's backward completed), since the engine was made.
    [[nodiscard]] std::uint64_t completed_samples() const noexcept { return this->completed().samples; }

    [[nodiscard]] pipe_type& pipeline() noexcept { return this->pipeline_engine(); }
    [[nodiscard]] const pipe_type& pipeline() const noexcept { return this->pipeline_engine(); }
    /// Mean training loss of the last finished epoch, over all its micro-batches.
    [[nodiscard]] double epoch_train_loss() const noexcept { return last_epoch_loss_; }

private:
    // The rank of every stage (--transport mpi).
    [[nodiscard]] std::vector<int> rank_of() const {
        std::vector<int> r(pipeline().number_of_stages());
        for (std::size_t s = 0; s < r.size(); ++s) r[s] = pipeline().engine_options().remote->rank_of(s);
        return r;
    }

    pipeprop::pb::completed_losses epoch_start_;
    double last_epoch_loss_ = 0.0;
    cluster* ranks_ = nullptr;
};

}  // namespace train
