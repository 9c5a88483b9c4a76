// examples/train/interval_log.hpp: the --log-every lines of the metrics file. Every N samples trained, the mean
// training loss of the samples whose loss became known since the last line ({"epoch":E,"samples":n,"interval":true,
// "completed_samples":k,"train_loss":...,"lr":...}, plus every stage's weight and velocity L2 norms with
// --log-stage-norms). PB learns a micro-batch's loss at its backward, up to 2 (S - 1) micro-batches after its push
// (the concurrent executor: once per graph run of --push-buffer micro-batches), so k can differ from the samples
// trained since the last line; the epoch's last line comes after its drain, so that the lines of an epoch trained in
// one run hold every one of its losses: their k sum to the epoch's samples and their k-weighted mean is its
// train_loss. An epoch stopped by a signal and resumed lacks the lines of the losses known between its last line and
// the stop (the resumed run keeps only the metrics lines of the epochs its checkpoint completed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>

#include "train/json.hpp"
#include "train/options.hpp"
#include "train/run_engine.hpp"

namespace train {

/// One epoch's --log-every lines, written to `metrics` (open, or nothing is written) for `engine`.
class interval_log {
public:
    interval_log(const common_options& o, std::ostream& metrics, bool metrics_open, run_engine& engine,
                 std::size_t epoch)
        : o_(o), metrics_(metrics), engine_(engine), epoch_(epoch), on_(o.log_every > 0 && metrics_open),
          known_before_(engine.completed_samples()) {}

    /// After a batch of b samples whose train_batch returned `loss` (the completed losses' sum divided by b): writes a
    /// line when --log-every samples were trained since the last one and the epoch goes on (`last`: it does not).
    void add(double loss, std::size_t b, bool last) {
        if (!on_) return;
        sum_ += loss * static_cast<double>(b);
        pushed_ += b;
        if (pushed_ >= o_.log_every && !last) write();
    }
    /// After the epoch's drain, which completed losses summing to `drained`: the epoch's last line.
    void end_of_epoch(double drained) {
        if (!on_) return;
        sum_ += drained;
        write();
    }

private:
    // A line with the losses known since the last one; none when no loss became known (a PB pipeline filling).
    void write() {
        const std::uint64_t known_now = engine_.completed_samples();
        const auto known = static_cast<std::size_t>(known_now - known_before_);
        pushed_ = 0;
        if (known == 0) return;
        json_line m;
        m.add("epoch", epoch_ + 1)
            .add("samples", engine_.samples_seen())
            .add("interval", true)
            .add("completed_samples", known)
            .add("train_loss", sum_ / static_cast<double>(known))
            .add("lr", engine_.current_learning_rate());
        if (o_.log_stage_norms) {
            const auto n = engine_.norms_by_stage();
            m.add("stage_weight_norm", std::span<const double>(n.weights))
                .add("stage_velocity_norm", std::span<const double>(n.velocities));
        }
        metrics_ << m.str() << '\n' << std::flush;
        if (!metrics_) throw std::runtime_error(o_.metrics + ": writing the metrics file failed");
        sum_ = 0.0;
        known_before_ = known_now;
    }

    const common_options& o_;
    std::ostream& metrics_;
    run_engine& engine_;
    std::size_t epoch_;
    bool on_;
    std::uint64_t known_before_;
    double sum_ = 0.0;
    std::size_t pushed_ = 0;
};

}  // namespace train
