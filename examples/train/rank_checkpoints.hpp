// examples/train/rank_checkpoints.hpp: checkpoints of a run whose stages run on P ranks (--transport mpi, issue 15
// item 2). Layout of --checkpoint-out DIR:
//   DIR/ranks.txt                   the manifest: format line, "ranks P", "epoch E", "directory epoch-E", and per
//                                   rank "rank R rank-R: stages a-b" (which stages that rank's files hold current)
//   DIR/epoch-E/rank-R/             rank R's checkpoint at the drained end of epoch E (pipeprop::save_checkpoint:
//                                   its whole engine, the weights, optimizer and policy state of its own stages, and
//                                   the data position)
// Every rank writes its directory (atomically), then the ranks meet and rank 0 replaces the manifest (a temporary
// file renamed over it) and removes the other epochs' directories: a crash at any point leaves the manifest naming a
// complete set, the previous one until the new one is complete. Loading (--checkpoint-in DIR) needs the same P and
// stage cut (each rank checks its own part: pipeprop::pb::load_state); a single-process run cannot load it (each
// rank's files hold only its own stages' current state), and is told so.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "pipeprop/checkpoint.hpp"
#include "train/cluster.hpp"

namespace train {

/// A problem with the manifest itself (missing, malformed, another P): every rank finds the same, so the main
/// program reports it on rank 0 only.
class rank_manifest_error : public pipeprop::checkpoint_error {
public:
    using pipeprop::checkpoint_error::checkpoint_error;
};

inline constexpr const char* rank_manifest_name = "ranks.txt";
inline constexpr const char* rank_manifest_format = "pipeprop multi-rank checkpoint 1";

/// The directory of rank `rank`'s part of the checkpoint of epoch `epoch` under `root`.
[[nodiscard]] inline std::filesystem::path rank_checkpoint_dir(const std::string& root, std::size_t epoch, int rank) {
    return std::filesystem::path(root) / fmt::format("epoch-{:04}", epoch) / fmt::format("rank-{}", rank);
}

/// Where this rank's part of the multi-rank checkpoint `root` is. Throws rank_manifest_error when the manifest is
/// missing or malformed or was written by another number of ranks.
[[nodiscard]] inline std::filesystem::path rank_checkpoint_to_load(const std::string& root, const cluster& c) {
    const std::filesystem::path manifest = std::filesystem::path(root) / rank_manifest_name;
    std::ifstream in(manifest);
    if (!in)
        throw rank_manifest_error(fmt::format(
            "{}: no {} (not a checkpoint of a --transport mpi run; a single-process checkpoint cannot be resumed "
            "across ranks)", root, rank_manifest_name));
    std::string format, line, directory;
    std::getline(in, format);
    int ranks = -1;
    std::size_t epoch = 0;
    while (std::getline(in, line)) {
        std::istringstream words(line);
        std::string key;
        words >> key;
        if (key == "ranks") words >> ranks;
        else if (key == "epoch") words >> epoch;
        else if (key == "directory") words >> directory;
    }
    if (format != rank_manifest_format || ranks <= 0 || directory.empty() || directory.find('/') != std::string::npos)
        throw rank_manifest_error(manifest.string() + ": not a pipeprop multi-rank checkpoint manifest");
    if (ranks != c.size())
        throw rank_manifest_error(fmt::format(
            "{}: written by {} ranks, this run has {}; resume it with mpirun -np {} and the same --stages",
            manifest.string(), ranks, c.size(), ranks));
    return std::filesystem::path(root) / directory / fmt::format("rank-{}", c.rank());
}

/// For a single-process run given --checkpoint-in `root`: throws pipeprop::checkpoint_error when it is a multi-rank
/// checkpoint.
inline void refuse_rank_checkpoint(const std::string& root) {
    std::error_code ec;
    if (std::filesystem::exists(std::filesystem::path(root) / rank_manifest_name, ec))
        throw pipeprop::checkpoint_error(fmt::format(
            "{}: a checkpoint of a --transport mpi run (each rank holds only its own stages' current state): resume "
            "it with mpirun -np P ... --transport mpi, as it was written", root));
}

/// Saves rank c.rank()'s checkpoint `ck` of epoch `epoch` under `root` and, once every rank has saved its own, lets
/// rank 0 write the manifest and remove the other epochs' directories (collective). stages_by_rank[r]: rank r's
/// stages, for the manifest ("a-b"). Throws pipeprop::checkpoint_error when a write fails (the previous manifest and
/// its directories are then left as they were).
inline void save_rank_checkpoint(const pipeprop::checkpoint& ck, const std::string& root, std::size_t epoch,
                                 const std::vector<std::string>& stages_by_rank, cluster& c) {
    const std::filesystem::path mine = rank_checkpoint_dir(root, epoch, c.rank());
    std::error_code ec;
    std::filesystem::create_directories(mine.parent_path(), ec);
    if (ec)
        throw pipeprop::checkpoint_error(mine.parent_path().string() + ": cannot create the directory: " +
                                         ec.message());
    pipeprop::save_checkpoint(ck, mine);
    c.barrier();  // every rank's directory is complete
    if (c.rank() != 0) return;
    const std::filesystem::path manifest = std::filesystem::path(root) / rank_manifest_name;
    const std::filesystem::path tmp = manifest.string() + ".tmp-" + std::to_string(::getpid());
    {
        std::ofstream out(tmp, std::ios::trunc);
        out << rank_manifest_format << '\n'
            << "ranks " << c.size() << '\n'
            << "epoch " << epoch << '\n'
            << "directory " << mine.parent_path().filename().string() << '\n';
        for (std::size_t r = 0; r < stages_by_rank.size(); ++r)
            out << "rank " << r << " rank-" << r << ": stages " << stages_by_rank[r] << '\n';
        out.flush();
        if (!out) throw pipeprop::checkpoint_error(tmp.string() + ": cannot write the manifest");
    }
    std::filesystem::rename(tmp, manifest, ec);
    if (ec) throw pipeprop::checkpoint_error(manifest.string() + ": cannot replace the manifest: " + ec.message());
    for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("epoch-", 0) == 0 && entry.path() != mine.parent_path())
            std::filesystem::remove_all(entry.path(), ec);  // best effort: a left-over directory is harmless
    }
}

}  // namespace train
