// examples/train/rank_checkpoints.hpp: checkpoints of a run whose stages run on P ranks (--transport
// mpi). Layout of --checkpoint-out DIR:
//   DIR/ranks.txt                   the manifest: format line, "ranks P", "epoch E", "directory epoch-E", and per
//                                   rank "rank R rank-R: stages a-b" (which stages that rank's files hold current)
//   DIR/epoch-E-T/rank-R/           rank R's part of the checkpoint at the drained end of epoch E
//                                   (pipeprop::save_checkpoint of rank_part: the tensors of its own stages' layers,
//                                   weights, optimizer and policy state, and every scalar: the data position and
//                                   rank_layout, every stage's layers and rank); T is
//                                   a token rank 0 draws per save, so a save never writes into the set the manifest
//                                   names (also when it saves the same epoch again)
// Every rank writes its directory (atomically), then the ranks meet and rank 0 replaces the manifest (a synced
// temporary file renamed over it) and removes the other saves' directories: a crash at any point leaves the manifest
// naming a complete set. DIR must be on a filesystem every rank sees (on several hosts: a shared one). Loading
// (--checkpoint-in DIR) reads every rank's part and puts the whole network's state together
// (load_whole_rank_checkpoint), so a run with another number of ranks, another stage cut or one process resumes it
// (resharding). One rank's directory alone is refused (its other stages are not current).
#pragma once

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstddef>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <variant>
#include <vector>

#include "pipeprop/checkpoint.hpp"
#include "train/cluster.hpp"

namespace train {

/// A problem with the checkpoint that every rank finds the same (manifest missing or malformed, a part that does not
/// fit, a refusal by the engine's load_state: all ranks load the same whole checkpoint), so the main
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

/// Every stage's layers and rank, as a rank's checkpoint records them (scalar rank_layout, rank_layout_text:
/// "[0,3)@0 [3,6)@1 ..."). Throws rank_manifest_error naming `where` for any other text.
struct saved_rank_layout {
    std::vector<pipeprop::layer_range> ranges;  ///< stage s: its layers
    std::vector<int> rank;                      ///< stage s: its rank
};
[[nodiscard]] inline saved_rank_layout parse_rank_layout(const std::string& text, const std::string& where) {
    saved_rank_layout l;
    std::istringstream in(text);
    std::string item;
    while (in >> item) {
        std::size_t b = 0, e = 0;
        int r = -1;
        char tail = 0;
        if (std::sscanf(item.c_str(), "[%zu,%zu)@%d%c", &b, &e, &r, &tail) != 3 || e <= b || r < 0 ||
            b != (l.ranges.empty() ? 0 : l.ranges.back().end))
            throw rank_manifest_error(fmt::format("{}: rank_layout '{}' is not a stage layout", where, text));
        l.ranges.push_back({b, e});
        l.rank.push_back(r);
    }
    if (l.ranges.empty()) throw rank_manifest_error(fmt::format("{}: no rank_layout scalar", where));
    return l;
}

/// The rank that holds tensor `name` of a network whose positions are named node_names (layer_stack::node_names)
/// under `layout`: the rank of the stage of the node whose name is the longest "<node>." prefix of `name`; rank 0
/// for a tensor of no node.
[[nodiscard]] inline int tensor_rank(const std::string& name, std::span<const std::string_view> node_names,
                                     const saved_rank_layout& layout) {
    std::size_t best = 0, best_length = 0;
    for (std::size_t i = 0; i < node_names.size(); ++i) {
        const std::string_view n = node_names[i];
        if (n.size() > best_length && name.size() > n.size() && name.compare(0, n.size(), n) == 0 &&
            name[n.size()] == '.') {
            best = i;
            best_length = n.size();
        }
    }
    if (best_length == 0) return 0;
    for (std::size_t s = 0; s < layout.ranges.size(); ++s)
        if (layout.ranges[s].contains(best)) return layout.rank[s];
    return 0;
}

/// Rank `rank`'s part of checkpoint `c` (a whole engine's state with the scalar rank_layout): its scalars and the
/// tensors of its own stages' layers (tensor_rank), the only ones current on that rank.
[[nodiscard]] inline pipeprop::checkpoint rank_part(const pipeprop::checkpoint& c,
                                                    std::span<const std::string_view> node_names, int rank) {
    const saved_rank_layout layout = parse_rank_layout(c.scalar("rank_layout"), "rank_part");
    pipeprop::checkpoint part;
    part.signature = c.signature;
    for (const pipeprop::checkpoint_tensor& t : c.tensors())
        if (tensor_rank(t.name, node_names, layout) == rank)
            std::visit([&](const auto& v) { part.add_tensor(t.name, t.shape, std::span(v)); }, t.values);
    for (const auto& [key, value] : c.scalars()) part.set_scalar(key, value);
    return part;
}

/// True when `root` is a multi-rank checkpoint (holds a ranks.txt manifest).
[[nodiscard]] inline bool is_rank_checkpoint(const std::string& root) {
    std::error_code ec;
    return std::filesystem::exists(std::filesystem::path(root) / rank_manifest_name, ec);
}

/// The multi-rank checkpoint `root`, written by any number of ranks P, as one checkpoint of the whole network, for
/// a run with any number of ranks and any stage cut (resharding: docs/pb-semantics.md §7). Every rank's part holds
/// the tensors of its own stages (rank_part; node_names: the network's positions, layer_stack::node_names); the
/// whole one has every part's tensors, each per-stage PB scalar (pb_stage_XX_...) from stage XX's rank and every
/// other scalar from rank 0; `saved_layout` gets the saving run's rank_layout, which the
/// result no longer holds. Throws rank_manifest_error for a missing, damaged or incomplete manifest and parts that
/// disagree, pipeprop::checkpoint_error for an unreadable part.
[[nodiscard]] inline pipeprop::checkpoint load_whole_rank_checkpoint(const std::string& root,
                                                                     std::span<const std::string_view> node_names,
                                                                     std::string& saved_layout) {
    const std::filesystem::path manifest = std::filesystem::path(root) / rank_manifest_name;
    std::ifstream in(manifest);
    std::error_code ec;
    if (!in && !std::filesystem::is_directory(root, ec))
        throw rank_manifest_error(root + ": checkpoint directory not found");
    if (!in)
        throw rank_manifest_error(fmt::format("{}: no {} (not a checkpoint of a --transport mpi run)", root,
                                              rank_manifest_name));
    std::string format, line, directory;
    std::getline(in, format);
    int ranks = -1, rank_lines = 0;
    while (std::getline(in, line)) {
        std::istringstream words(line);
        std::string key;
        words >> key;
        if (key == "ranks") words >> ranks;
        else if (key == "directory") words >> directory;
        else if (key == "rank") ++rank_lines;
    }
    if (format != rank_manifest_format || ranks <= 0 || rank_lines != ranks || directory.rfind("epoch-", 0) != 0 ||
        directory.find('/') != std::string::npos)
        throw rank_manifest_error(manifest.string() + ": not a complete pipeprop multi-rank checkpoint manifest "
                                                      "(damaged or cut short)");
    std::vector<pipeprop::checkpoint> parts;
    for (int r = 0; r < ranks; ++r)
        parts.push_back(pipeprop::load_checkpoint(std::filesystem::path(root) / directory / fmt::format("rank-{}", r)));
    const std::string part0 = (std::filesystem::path(root) / directory / "rank-0").string();
    saved_layout = parts[0].has_scalar("rank_layout") ? parts[0].scalar("rank_layout") : "";
    const saved_rank_layout layout = parse_rank_layout(saved_layout, part0);
    for (int r = 0; r < ranks; ++r)
        if (!parts[r].has_scalar("rank_layout") || parts[r].scalar("rank_layout") != saved_layout ||
            parts[r].signature != parts[0].signature)
            throw rank_manifest_error(fmt::format("{}: the parts of rank 0 and rank {} belong to different runs", root, r));
    for (int rank : layout.rank)
        if (rank >= ranks)
            throw rank_manifest_error(fmt::format("{}: the layout {} names rank {} of {}", root, saved_layout, rank,
                                                  ranks));
    if (layout.ranges.back().end != node_names.size())
        throw rank_manifest_error(fmt::format("{}: the layout {} does not cover the network's {} layers", root,
                                              saved_layout, node_names.size()));
    pipeprop::checkpoint whole;
    whole.signature = parts[0].signature;
    // Each part holds the tensors of its own stages (rank_part; parts written before rank_part hold every tensor,
    // the others' not current: skipped).
    for (int r = 0; r < ranks; ++r)
        for (const pipeprop::checkpoint_tensor& t : parts[static_cast<std::size_t>(r)].tensors())
            if (tensor_rank(t.name, node_names, layout) == r)
                std::visit([&](const auto& v) { whole.add_tensor(t.name, t.shape, std::span(v)); }, t.values);
    for (const auto& [key, value] : parts[0].scalars()) {
        if (key == "rank_layout") continue;
        std::size_t stage = 0;
        int used = 0;
        if (std::sscanf(key.c_str(), "pb_stage_%zu_%n", &stage, &used) == 1 && used > 0 &&
            stage < layout.rank.size())
            whole.set_scalar(key, parts[static_cast<std::size_t>(layout.rank[stage])].scalar(key));
        else
            whole.set_scalar(key, value);
    }
    return whole;
}

/// Saves rank c.rank()'s part (rank_part) of its engine's checkpoint `whole` of epoch `epoch` under `root` and, once every rank has saved its own, lets
/// rank 0 write the manifest and remove the other epochs' directories (collective). stages_by_rank[r]: rank r's
/// stages, for the manifest ("a-b"). Throws pipeprop::checkpoint_error when a write fails (the previous manifest and
/// its directories are then left as they were).
inline void save_rank_checkpoint(const pipeprop::checkpoint& whole, std::span<const std::string_view> node_names,
                                 const std::string& root, std::size_t epoch,
                                 const std::vector<std::string>& stages_by_rank, cluster& c) {
    const pipeprop::checkpoint ck = rank_part(whole, node_names, c.rank());
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
