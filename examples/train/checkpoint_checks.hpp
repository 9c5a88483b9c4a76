// examples/train/checkpoint_checks.hpp: the main program's checks around its checkpoints, beyond the library's:
//   require_finite_state   the state an epoch ends with (weights, optimizer state, running state: what the engine
//                          saves) and its evaluation loss are finite, before metrics and checkpoint are written, so
//                          that a run diverging in an update whose loss is never computed again (the last update of
//                          --mode sgd / sync, the updates PB's drain applies) never replaces the last good checkpoint;
//   require_same_network   a checkpoint given to --checkpoint-in was saved by a run of the same network;
//   holds_pb_state         a checkpoint holds PB's per-stage state (the mode recognised from content);
//   require_position_in_epoch  its data position lies within the epoch it was saved in.
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "pipeprop/checkpoint.hpp"
#include "pipeprop/non_finite_loss_error.hpp"
#include "train/options.hpp"

namespace train {

/// Where the first NaN or infinite value of a checkpoint's tensors is.
struct non_finite_value {
    std::string tensor;  ///< tensor name, e.g. layer_03.weight.velocity
    std::size_t index = 0;
    bool nan = false;    ///< NaN (else an infinite value)
};

/// The first NaN or infinite value among c's tensors (in their order), or nothing when all are finite.
inline std::optional<non_finite_value> first_non_finite(const pipeprop::checkpoint& c) {
    for (const pipeprop::checkpoint_tensor& t : c.tensors()) {
        const auto found = std::visit(
            [&](const auto& v) -> std::optional<non_finite_value> {
                for (std::size_t i = 0; i < v.size(); ++i)
                    if (!std::isfinite(v[i])) return non_finite_value{t.name, i, std::isnan(v[i])};
                return std::nullopt;
            },
            t.values);
        if (found) return found;
    }
    return std::nullopt;
}

/// The layer of a tensor named "layer_XX.<tensor>" (checkpoint/training_state.hpp), or nothing.
inline std::optional<std::size_t> layer_of_tensor(const std::string& name) {
    constexpr std::string_view prefix = "layer_";
    if (name.rfind(prefix, 0) != 0) return std::nullopt;
    std::size_t layer = 0, i = prefix.size();
    if (i >= name.size() || name[i] < '0' || name[i] > '9') return std::nullopt;
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9'; ++i) layer = layer * 10 + std::size_t(name[i] - '0');
    return layer;
}

/// The stage holding `layer` by c's scalar pb_stages ("b0-e0,b1-e1,...": a PB checkpoint), or nothing.
inline std::optional<std::size_t> stage_of_layer(const pipeprop::checkpoint& c, std::size_t layer) {
    if (!c.has_scalar("pb_stages")) return std::nullopt;
    const std::string& text = c.scalar("pb_stages");
    std::size_t stage = 0, pos = 0;
    while (pos < text.size()) {
        std::size_t begin = 0, end = 0;
        if (std::sscanf(text.c_str() + pos, "%zu-%zu", &begin, &end) != 2) return std::nullopt;
        if (layer >= begin && layer < end) return stage;
        const std::size_t comma = text.find(',', pos);
        if (comma == std::string::npos) break;
        pos = comma + 1;
        ++stage;
    }
    return std::nullopt;
}

/// Throws pipeprop::non_finite_loss_error (the program exits 1, nothing is saved) unless every value of `state`
/// (engine.save_state's checkpoint) and the evaluation loss are finite. The message names the epoch (from 1), the
/// run's last update (scalar pb_micro_batches: PB's micro-batch, from 0; else step_count: the update, from 0), the
/// tensor and, for PB, its stage: every loss before was finite, so the updates no loss was computed after diverged
/// (--mode sgd / sync: the epoch's last update; --mode pb: the in-flight micro-batches' updates, which the drain at
/// the end of the epoch applies).
inline void require_finite_state(const pipeprop::checkpoint& state, double evaluation_loss, std::size_t epoch,
                                 std::uint64_t samples_seen) {
    const std::optional<non_finite_value> bad = first_non_finite(state);
    if (!bad && std::isfinite(evaluation_loss)) return;
    const bool pb = state.has_scalar("pb_micro_batches");
    const auto updates = state.has_scalar(pb ? "pb_micro_batches" : "step_count")
                             ? state.scalar_as<std::uint64_t>(pb ? "pb_micro_batches" : "step_count")
                             : std::uint64_t{0};
    std::string what;
    if (bad) {
        std::string where;
        if (const auto layer = layer_of_tensor(bad->tensor)) {
            where = fmt::format(" (layer {}", *layer);
            if (const auto stage = stage_of_layer(state, *layer)) where += fmt::format(", stage {}", *stage);
            where += ")";
        }
        what = fmt::format("tensor '{}'{} holds {} at index {}", bad->tensor, where,
                           bad->nan ? "NaN" : "an infinite value", bad->index);
        if (!std::isfinite(evaluation_loss))
            what += fmt::format(", and the evaluation loss is {}", std::isnan(evaluation_loss) ? "NaN" : "infinite");
    } else {
        what = fmt::format("the evaluation loss became {}", std::isnan(evaluation_loss) ? "NaN" : "infinite");
    }
    const std::string last =
        updates == 0 ? std::string("before any update")
        : pb ? fmt::format("in the updates up to micro-batch {} (the last of epoch {}, after {} samples; the drain at "
                           "the end of the epoch applied those still in flight)",
                           updates - 1, epoch, samples_seen)
             : fmt::format("in update {} (the last of epoch {}, after {} samples)", updates - 1, epoch, samples_seen);
    throw pipeprop::non_finite_loss_error(
        fmt::format("the state at the end of epoch {} is not finite: {}. Every loss computed was finite, so the "
                    "training diverged {}; nothing was saved. Lower the learning rate or check the data.",
                    epoch, what, last),
        updates == 0 ? 0 : updates - 1, samples_seen);
}

/// Throws pipeprop::checkpoint_error (exit 1) when checkpoint c (of --checkpoint-in `where`) was saved by a run of
/// another network than this run's --network `network` (network type `network_type`, train::network_type_key): by
/// its scalar network_type when it has one, else by its scalar network. The message names both networks (their
/// tensors differ, so loading would fail on the first missing or misshapen tensor instead).
inline void require_same_network(const pipeprop::checkpoint& c, const std::string& network,
                                 const std::string& network_type, const std::string& where) {
    const auto describe = [](const std::string& name, const std::string& type) {
        return "--network " + name + (type.empty() || type == name ? "" : " (network type " + type + ")");
    };
    const std::string saved = c.has_scalar("network") ? c.scalar("network") : std::string();
    const std::string saved_type = c.has_scalar("network_type") ? c.scalar("network_type") : std::string();
    if ((saved_type.empty() || saved_type == network_type) && (saved.empty() || saved == network)) return;
    const std::string name = saved.empty() ? saved_type : saved;
    throw pipeprop::checkpoint_error(fmt::format(
        "{}: a checkpoint of {}, but this run trains {}; resume it with --network {}{}, or start without "
        "--checkpoint-in",
        where, describe(name, saved_type), describe(network, network_type), name,
        saved_type.empty() || saved_type == name ? "" : " and the --norm / --data of network type " + saved_type));
}

/// True when checkpoint c holds the state of a --mode pb engine (pipeprop/pb/checkpoint.hpp): a scalar named pb_*
/// (pb_format, pb_stages, pb_micro_batches, ...) or a per-stage scalar or tensor stage_*. --mode sgd and sync save
/// neither.
inline bool holds_pb_state(const pipeprop::checkpoint& c) {
    for (const auto& [key, value] : c.scalars())
        if (key.rfind("pb_", 0) == 0 || key.rfind("stage_", 0) == 0) return true;
    for (const pipeprop::checkpoint_tensor& t : c.tensors())
        if (t.name.rfind("stage_", 0) == 0) return true;
    return false;
}

/// Throws pipeprop::checkpoint_error (exit 1) when checkpoint c's data position (scalar "position": samples of the
/// current epoch already trained) exceeds the epoch it was saved in (scalar "epoch_samples", or `train_count`, the
/// training set's size, for a checkpoint without it): such a position would silently skip the rest of the epoch.
inline void require_position_in_epoch(const pipeprop::checkpoint& c, std::size_t train_count,
                                      const std::string& where) {
    const auto position = c.scalar_as<std::size_t>("position");
    const bool saved_size = c.has_scalar("epoch_samples");
    const std::size_t limit = saved_size ? c.scalar_as<std::size_t>("epoch_samples") : train_count;
    if (position > limit)
        throw pipeprop::checkpoint_error(fmt::format(
            "{}: position {} lies beyond the epoch it was saved in ({} samples{}); the manifest was edited or is "
            "corrupt",
            where, position, limit, saved_size ? "" : ": the training set"));
}

/// Checks that a checkpoint of --mode `saved` may be resumed with --mode `mode_name`: sgd and sync share
/// one optimizer state (parameters, batch momentum velocity, step count: the same update up to float summation
/// order), so their checkpoints move freely between them. A pb checkpoint holds per-stage velocities of micro-batch
/// updates under the scaled learning rate and momentum (and the mitigation's state); it has no exact counterpart in
/// sgd's or sync's batch SGD, and reusing it wrecked training (train loss 60.75), so it is refused:
/// throws pipeprop::checkpoint_error naming both modes (exit 1). A pb run from an sgd or sync checkpoint starts from
/// its weights and data position with zero velocity (a note says so). The mode is recognised from the content
/// (holds_pb_state: PB's per-stage state), not from the "mode" scalar alone: a checkpoint whose "mode" line
/// contradicts its content is refused as edited or corrupt.
inline void check_resume_mode(const pipeprop::checkpoint& c, const std::string& mode_name, const std::string& where,
                              const common_options& o) {
    const bool pb_content = holds_pb_state(c);
    const std::string saved = pb_content ? std::string("pb") : c.has_scalar("mode") ? c.scalar("mode") : "";
    if (c.has_scalar("mode") && (c.scalar("mode") == "pb") != pb_content)
        throw pipeprop::checkpoint_error(fmt::format(
            "{}: its manifest says mode {}, but it {} PB's per-stage state (scalars pb_*, stage_*); the manifest was "
            "edited or is corrupt",
            where, c.scalar("mode"), pb_content ? "holds" : "does not hold"));
    if (saved == "pb" && mode_name != "pb")
        throw pipeprop::checkpoint_error(fmt::format(
            "{}: a --mode pb checkpoint cannot be resumed with --mode {}: PB's optimizer state (per-stage velocities "
            "of micro-batch updates, mitigation state) does not convert exactly to the batch momentum SGD of --mode "
            "{}; resume it with --mode pb, or start --mode {} without --checkpoint-in",
            where, mode_name, mode_name, mode_name));
    if (mode_name == "pb" && !saved.empty() && saved != "pb")
        note(o, fmt::format("note: --mode pb starts from the weights and data position of the --mode {} checkpoint "
                            "{}; its velocity (batch updates) is not used",
                            saved, where));
}

}  // namespace train
