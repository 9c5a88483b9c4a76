// examples/train/run_files.hpp: the main program's file input and output that does not depend on the network type,
// compiled once (train/run_files.cpp) instead of in each per-network unit: the checkpoint --checkpoint-in
// names (single-process or multi-rank, train/rank_checkpoints.hpp) and the ones written to --checkpoint-out, the
// image and text datasets of --data, the --metrics file. The units call these; the library's reading and writing
// code (checkpoint files, IDX / CIFAR-10 / text readers) is then generated in one translation unit.
#pragma once

#include <cstddef>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pipeprop/checkpoint/content.hpp"
#include "pipeprop/data/dataset.hpp"
#include "pipeprop/data/text_dataset.hpp"
#include "train/options.hpp"

namespace train {

/// The checkpoint of --checkpoint-in, checked for this network (require_same_network) and --mode `mode_name`
/// (check_resume_mode): a single-process checkpoint, or a multi-rank one put together whole
/// (load_whole_rank_checkpoint; node_names: the network's positions, layer_stack::node_names). `multi_rank` and
/// `saved_layout` (its rank_layout) say which. One rank's part alone is refused. Throws pipeprop::checkpoint_error
/// (exit 1); under --transport mpi as rank_manifest_error, said once: every rank reads the same.
[[nodiscard]] pipeprop::checkpoint read_resume_checkpoint(const common_options& o,
                                                          std::span<const std::string_view> node_names,
                                                          const std::string& mode_name, bool& multi_rank,
                                                          std::string& saved_layout);

/// Writes checkpoint c (the engine's state and the run's scalars) to --checkpoint-out: with --transport mpi this
/// rank's part (save_rank_checkpoint of epoch `epoch`; stages_by_rank: every rank's stages for the manifest), else
/// one directory (pipeprop::save_checkpoint). Throws pipeprop::checkpoint_error (the previous checkpoint kept).
void write_run_checkpoint(const pipeprop::checkpoint& c, const common_options& o, std::size_t epoch,
                          std::span<const std::string_view> node_names, const std::vector<std::string>& stages_by_rank);

/// Loads the image dataset of --data for a network whose input is `input` [C, H, W]; a size that does not match
/// names the input of every --network. Throws data_error.
[[nodiscard]] pipeprop::data::dataset_pair read_image_data(const common_options& o,
                                                           pipeprop::data::image_geometry input);

/// Loads the text corpus of --data (default: the fortunes corpus) as next-token sequences of L tokens for a model of
/// vocabulary `model_vocabulary` (byte level). Throws data_error.
[[nodiscard]] pipeprop::data::text_dataset load_text_data(const common_options& o, std::size_t length,
                                                          std::size_t model_vocabulary);

/// Opens the --metrics file. A fresh run truncates it. A resumed run (--checkpoint-in) appends: it keeps the lines
/// of the epochs the checkpoint has completed (epoch <= `completed_epochs`; a line that does not start with
/// {"epoch":N is kept too) and drops those of later epochs, which the resumed run computes again, so that resuming
/// with the same file gives the same lines as an uninterrupted run. The kept lines are rewritten atomically (a
/// temporary file renamed over it). Throws std::runtime_error naming the file (exit 1).
[[nodiscard]] std::ofstream open_metrics(const common_options& o, bool resumed, std::size_t completed_epochs);

}  // namespace train
