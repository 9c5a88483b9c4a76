// examples/train/rank_checkpoints.hpp: checkpoints of a run whose stages run on P ranks (--transport
// mpi). Layout of --checkpoint-out DIR:
//   DIR/ranks.txt                   the manifest: format line, "ranks P", "epoch E", "directory epoch-E", and per
//                                   rank "rank R rank-R: stages a-b" (which stages that rank's files hold current)
//   DIR/epoch-E-T/rank-R/           rank R's checkpoint at the drained end of epoch E (pipeprop::save_checkpoint:
//                                   its whole engine, the weights, optimizer and policy state of its own stages, the
//                                   data position, and the scalar rank_layout: every stage's layers and rank); T is
//                                   a token rank 0 draws per save, so a save never writes into the set the manifest
//                                   names (also when it saves the same epoch again)
// Every rank writes its directory (atomically), then the ranks meet and rank 0 replaces the manifest (a synced
// temporary file renamed over it) and removes the other saves' directories: a crash at any point leaves the manifest
// naming a complete set. DIR must be on a filesystem every rank sees (on several hosts: a shared one). Loading
// (--checkpoint-in DIR) needs the same P, stage cut and rank of every stage (rank_layout; refused otherwise, said
// by rank 0); a single-process run cannot load it (each rank's files hold only its own stages' current state), nor
// one rank's directory, and is told so.
#pragma once

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
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

/// The directory of rank `rank`'s part of the checkpoint of epoch `epoch`, save token `token`, under `root`.
[[nodiscard]] inline std::filesystem::path rank_checkpoint_dir(const std::string& root, std::size_t epoch,
                                                               std::uint64_t token, int rank) {
    return std::filesystem::path(root) / fmt::format("epoch-{:04}-{:x}", epoch, token) / fmt::format("rank-{}", rank);
}

/// --checkpoint-out of a --transport mpi run: absent (created at the first save), or a directory holding a
/// multi-rank checkpoint (ranks.txt), or an empty directory. Throws pipeprop::checkpoint_error otherwise.
inline void check_rank_checkpoint_destination(const std::string& root) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(root, ec))) {
        pipeprop::check_checkpoint_destination(root);  // where it would be created: an existing, writable directory
        return;
    }
    if (!fs::is_directory(root, ec) ||
        (!fs::is_regular_file(fs::path(root) / rank_manifest_name, ec) && !fs::is_empty(root, ec)))
        throw pipeprop::checkpoint_error(root + ": exists and is not a checkpoint of a --transport mpi run (no " +
                                         rank_manifest_name + "); refusing to write into it");
    // Written to by creating a directory in it (what the save does), not by permission bits (root passes access()).
    const std::string probe = root + "/.write-check-" + std::to_string(::getpid());
    if (::mkdir(probe.c_str(), 0777) != 0 && errno != EEXIST)
        throw pipeprop::checkpoint_error(root + ": the directory is not writable (" + std::strerror(errno) + ")");
    ::rmdir(probe.c_str());
}

/// For a run's own checks: throws rank_manifest_error unless the checkpoint's scalar rank_layout (what the saving
/// run's engine said: every stage's layers and rank) equals `layout`, this run's.
inline void require_rank_layout(const pipeprop::checkpoint& c, const std::string& layout, const std::string& where) {
    const std::string saved = c.has_scalar("rank_layout") ? c.scalar("rank_layout") : std::string("(none)");
    if (saved != layout)
        throw rank_manifest_error(fmt::format(
            "{}: saved with the stages on the ranks as {}, this run has {}; resume with the same --stages, schedule "
            "and number of ranks (a balanced cut is measured again: give the split points instead)",
            where, saved, layout));
}

/// Where this rank's part of the multi-rank checkpoint `root` is. Throws rank_manifest_error when the manifest is
/// missing or malformed or was written by another number of ranks.
[[nodiscard]] inline std::filesystem::path rank_checkpoint_to_load(const std::string& root, const cluster& c) {
    const std::filesystem::path manifest = std::filesystem::path(root) / rank_manifest_name;
    std::ifstream in(manifest);
    std::error_code ec;
    if (!in && !std::filesystem::is_directory(root, ec))
        throw rank_manifest_error(root + ": checkpoint directory not found");
    if (!in && std::filesystem::exists(std::filesystem::path(root) / "manifest.txt", ec))
        throw rank_manifest_error(fmt::format(
            "{}: a single-process checkpoint, or one rank's part of a --transport mpi checkpoint (no {}): give the "
            "directory that holds {} (a single-process checkpoint cannot be resumed across ranks)",
            root, rank_manifest_name, rank_manifest_name));
    if (!in)
        throw rank_manifest_error(fmt::format("{}: no {} (not a checkpoint of a --transport mpi run)", root,
                                              rank_manifest_name));
    std::string format, line, directory;
    std::getline(in, format);
    int ranks = -1, rank_lines = 0;
    std::size_t epoch = 0;
    while (std::getline(in, line)) {
        std::istringstream words(line);
        std::string key;
        words >> key;
        if (key == "ranks") words >> ranks;
        else if (key == "epoch") words >> epoch;
        else if (key == "directory") words >> directory;
        else if (key == "rank") ++rank_lines;
    }
    if (format != rank_manifest_format || ranks <= 0 || rank_lines != ranks || directory.rfind("epoch-", 0) != 0 ||
        directory.find('/') != std::string::npos)
        throw rank_manifest_error(manifest.string() + ": not a complete pipeprop multi-rank checkpoint manifest "
                                                      "(damaged or cut short)");
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
    std::uint64_t token = static_cast<std::uint64_t>(
                              std::chrono::system_clock::now().time_since_epoch().count()) ^
                          (static_cast<std::uint64_t>(::getpid()) << 40);
    c.broadcast(std::as_writable_bytes(std::span<std::uint64_t>(&token, 1)));  // rank 0's
    const std::filesystem::path mine = rank_checkpoint_dir(root, epoch, token, c.rank());
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
        std::ostringstream out;
        out << rank_manifest_format << '\n'
            << "ranks " << c.size() << '\n'
            << "epoch " << epoch << '\n'
            << "directory " << mine.parent_path().filename().string() << '\n';
        for (std::size_t r = 0; r < stages_by_rank.size(); ++r)
            out << "rank " << r << " rank-" << r << ": stages " << stages_by_rank[r] << '\n';
        pipeprop::detail::write_file_synced(tmp, out.str());
    }
    std::filesystem::rename(tmp, manifest, ec);
    if (ec) throw pipeprop::checkpoint_error(manifest.string() + ": cannot replace the manifest: " + ec.message());
    pipeprop::detail::sync_directory(root);  // the new manifest is durable before the old saves go
    for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("epoch-", 0) == 0 && entry.path() != mine.parent_path() && entry.is_directory(ec))
            std::filesystem::remove_all(entry.path(), ec);  // best effort: a left-over directory is harmless
    }
}

}  // namespace train
