// examples/train/run_checkpoint.hpp: the main program's checkpoints of a run: where it stands (run_position), the
// resume from --checkpoint-in (resume_run), the save to --checkpoint-out with the run's scalars
// (save_run_checkpoint), and the stop on SIGINT / SIGTERM between two batches (stop_for_signal: drain, save,
// stopped_by_signal). Used by the epoch loop (train/training_loop.hpp).
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "pipeprop/checkpoint.hpp"
#include "pipeprop/layer_stack.hpp"
#include "train/checkpoint_checks.hpp"
#include "train/options.hpp"
#include "train/rank_checkpoints.hpp"
#include "train/run_engine.hpp"
#include "train/run_files.hpp"
#include "train/stop_signals.hpp"

namespace train {

/// Where a checkpoint of the main program stands in the run: `epoch` epochs complete, then `position` samples of the
/// next one in its order (data_seed's permutation of an epoch of `epoch_samples` samples).
struct run_position {
    std::size_t epoch = 0, position = 0;
    std::uint64_t data_seed = 0;
    std::size_t epoch_samples = 0;
};

/// --checkpoint-in: restores `engine` (pipeprop::trainer::load_state) from the checkpoint, after the checks that it
/// belongs to this network and mode, and returns where the run continues (epoch and position in it, the data seed);
/// without --checkpoint-in the start of a fresh run. A multi-rank checkpoint (train/rank_checkpoints.hpp) is put
/// together whole, so any number of ranks and any stage cut resume it (resharding, said in a note). train_count: the
/// training set's size; epoch_size: this run's samples per epoch. Throws pipeprop::checkpoint_error (exit 1);
/// under --transport mpi as rank_manifest_error, said once: every rank reads the same.
inline run_position resume_run(run_engine& engine, const common_options& o, std::size_t train_count, std::size_t epoch_size,
                        const std::string& mode_name) {
    run_position at{0, 0, o.seed, epoch_size};
    if (o.checkpoint_in.empty()) return at;
    bool multi_rank = false;
    std::string saved_layout;
    const pipeprop::checkpoint c =
        read_resume_checkpoint(o, engine.node_names, mode_name, multi_rank, saved_layout);
    try {
        engine.load_state(c, o.checkpoint_in);
    } catch (const pipeprop::checkpoint_error& e) {
        if (o.ranks != nullptr) throw rank_manifest_error(e.what());  // every rank loads the same: said once
        throw;
    }
    if (multi_rank && o.ranks != nullptr && saved_layout != engine.rank_layout())
        note(o, "checkpoint: saved with the stages on the ranks as " + saved_layout + ", resharded to " +
                    engine.rank_layout());
    if (multi_rank && o.ranks == nullptr)
        note(o, "checkpoint: saved by a --transport mpi run with the stages on the ranks as " + saved_layout +
                    ", resumed in one process");
    at.epoch = c.scalar_as<std::size_t>("epoch");
    at.position = c.scalar_as<std::size_t>("position");
    require_position_in_epoch(c, train_count, o.checkpoint_in);
    at.data_seed = c.scalar_as<std::uint64_t>("data_seed");
    if (at.data_seed != o.seed)
        note(o, "note: shuffling continues with the checkpoint's seed " + std::to_string(at.data_seed) +
                    " (--seed " + std::to_string(o.seed) + " only seeds fresh runs)");
    if (c.has_scalar("epoch_samples") && c.scalar_as<std::size_t>("epoch_samples") != epoch_size)
        note(o, "note: the checkpoint was made with " + c.scalar("epoch_samples") +
                    " training samples per epoch, this run uses " + std::to_string(epoch_size) +
                    "; it is not a bit-identical continuation");
    if (at.position >= epoch_size) {
        ++at.epoch;
        at.position = 0;
    }
    note(o, "checkpoint: resumed from " + o.checkpoint_in + " at epoch " + std::to_string(at.epoch + 1) +
                ", sample " + std::to_string(at.position) + " (" + std::to_string(engine.samples_seen()) +
                " samples trained before)");
    return at;
}

/// Adds the run's scalars (where: run_position; mode, network, batch) to `c` (engine.save_state's) and saves it to
/// --checkpoint-out (--transport mpi: this rank's part, train/rank_checkpoints.hpp). Throws
/// pipeprop::checkpoint_error (the previous checkpoint kept).
inline void save_run_checkpoint(run_engine& engine, pipeprop::checkpoint& c, const common_options& o, const run_position& at,
                         const std::string& mode_name) {
    c.set_scalar("epoch", at.epoch);
    c.set_scalar("position", at.position);
    c.set_scalar("data_seed", at.data_seed);
    c.set_scalar("epoch_samples", at.epoch_samples);
    c.set_scalar("mode", mode_name);
    c.set_scalar("network", o.network);
    c.set_scalar("network_type", o.network_type);
    c.set_scalar("batch", o.batch);
    std::vector<std::string> stages_by_rank;
    if (o.ranks != nullptr) {
        c.set_scalar("rank_layout", engine.rank_layout());
        stages_by_rank = engine.stages_by_rank();
    }
    write_run_checkpoint(c, o, at.epoch, engine.node_names, stages_by_rank);
}

/// The loop's answer to SIGINT / SIGTERM (train/stop_signals.hpp), at `at` (between two batches): finishes the
/// micro-batches in flight (end_of_epoch or drain: pipeprop::trainer), saves the state there to --checkpoint-out when one is
/// given and anything was trained since the last save (after require_finite_state: a diverged state is never saved),
/// and throws stopped_by_signal saying what was saved and how to resume. Throws what the save throws.
[[noreturn]] inline void stop_for_signal(run_engine& engine, const common_options& o, const run_position& at,
                                  const std::string& mode_name, int sig, std::uint64_t saved_after) {
    const std::string where = fmt::format("epoch {}, sample {}", at.epoch + 1, at.position);
    if (o.checkpoint_out.empty())
        throw stopped_by_signal(sig, fmt::format("stopped by {} at {}; nothing saved (no --checkpoint-out)",
                                                 signal_name(sig), where));
    if (engine.samples_seen() == saved_after)
        throw stopped_by_signal(sig, fmt::format("stopped by {} at {}; nothing trained since the checkpoint in {} "
                                                 "(or the start), nothing saved",
                                                 signal_name(sig), where, o.checkpoint_out));
    (void)engine.end_of_epoch();  // the drained losses: no interval line after a stop
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
