// examples/train/run_checkpoint.hpp: the main program's checkpoints of a run: where it stands (run_position), the
// save to --checkpoint-out with the run's scalars (save_run_checkpoint), and the stop on SIGINT / SIGTERM between two
// batches (stop_for_signal: drain, save, stopped_by_signal). Used by the epoch loop (train/training_loop.hpp).
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "pipeprop/checkpoint.hpp"
#include "train/checkpoint_checks.hpp"
#include "train/options.hpp"
#include "train/rank_checkpoints.hpp"
#include "train/stop_signals.hpp"

namespace train {

/// Where a checkpoint of the main program stands in the run: `epoch` epochs complete, then `position` samples of the
/// next one in its order (data_seed's permutation of an epoch of `epoch_samples` samples).
struct run_position {
    std::size_t epoch = 0, position = 0;
    std::uint64_t data_seed = 0;
    std::size_t epoch_samples = 0;
};

/// Adds the run's scalars (where: run_position; mode, network, batch) to `c` (engine.save_state's) and saves it to
/// --checkpoint-out (--transport mpi: this rank's part, train/rank_checkpoints.hpp). Throws
/// pipeprop::checkpoint_error (the previous checkpoint kept).
template <class Engine>
void save_run_checkpoint(Engine& engine, pipeprop::checkpoint& c, const common_options& o, const run_position& at,
                         const std::string& mode_name) {
    c.set_scalar("epoch", at.epoch);
    c.set_scalar("position", at.position);
    c.set_scalar("data_seed", at.data_seed);
    c.set_scalar("epoch_samples", at.epoch_samples);
    c.set_scalar("mode", mode_name);
    c.set_scalar("network", o.network);
    c.set_scalar("network_type", o.network_type);
    c.set_scalar("batch", o.batch);
    if constexpr (requires { engine.stages_by_rank(); }) {
        if (o.ranks != nullptr) {
            c.set_scalar("rank_layout", engine.rank_layout());
            save_rank_checkpoint(c, o.checkpoint_out, at.epoch, engine.stages_by_rank(), *o.ranks);
            return;
        }
    }
    pipeprop::save_checkpoint(c, o.checkpoint_out);
}

/// The loop's answer to SIGINT / SIGTERM (train/stop_signals.hpp), at `at` (between two batches): finishes the
/// micro-batches in flight (end_of_epoch or drain: pipeprop::trainer), saves the state there to --checkpoint-out when one is
/// given and anything was trained since the last save (after require_finite_state: a diverged state is never saved),
/// and throws stopped_by_signal saying what was saved and how to resume. Throws what the save throws.
template <class Engine>
[[noreturn]] void stop_for_signal(Engine& engine, const common_options& o, const run_position& at,
                                  const std::string& mode_name, int sig, std::uint64_t saved_after) {
    const std::string where = fmt::format("epoch {}, sample {}", at.epoch + 1, at.position);
    if (o.checkpoint_out.empty())
        throw stopped_by_signal(sig, fmt::format("stopped by {} at {}; nothing saved (no --checkpoint-out)",
                                                 signal_name(sig), where));
    if (engine.samples_seen() == saved_after)
        throw stopped_by_signal(sig, fmt::format("stopped by {} at {}; nothing trained since the checkpoint in {} "
                                                 "(or the start), nothing saved",
                                                 signal_name(sig), where, o.checkpoint_out));
    if constexpr (requires { engine.end_of_epoch(); })
        engine.end_of_epoch();
    else
        (void)engine.drain();
    pipeprop::checkpoint c;
    engine.save_state(c);
    require_finite_state(c, 0.0, at.epoch + 1, engine.samples_seen());
    save_run_checkpoint(engine, c, o, at, mode_name);
    throw stopped_by_signal(
        sig, fmt::format("stopped by {} at {} ({} samples trained in all); checkpoint: saved to {}; resume with "
                         "--checkpoint-in {}",
                         signal_name(sig), where, engine.samples_seen(), o.checkpoint_out, o.checkpoint_out));
}

}  // namespace train
