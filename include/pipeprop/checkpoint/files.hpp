// pipeprop/checkpoint/files.hpp: a checkpoint on disk: save_checkpoint (atomic: see pipeprop/checkpoint.hpp),
// check_checkpoint_destination and load_checkpoint, over the files of checkpoint/npy_files.hpp.
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "pipeprop/checkpoint/content.hpp"
#include "pipeprop/checkpoint/npy_files.hpp"
#include "pipeprop/checkpoint/save_directories.hpp"
#include "pipeprop/checkpoint/signature.hpp"

namespace pipeprop {

namespace detail {
/// save_checkpoint with a hook called after each file of the temporary directory is written (tests use it to
/// simulate a failure in the middle of a save).
template <class AfterFile>
void save_checkpoint_impl(const checkpoint& c, const std::filesystem::path& dir, AfterFile&& after_file) {
    namespace fs = std::filesystem;
    if (dir.empty()) throw checkpoint_error("pipeprop::save_checkpoint: empty checkpoint path");
    const fs::path target = resolve_checkpoint_path(dir);
    std::error_code ec;
    const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
    if (fs::is_directory(parent, ec)) remove_stale_save_directories(parent, target.filename().string());
    const bool exists = fs::exists(fs::symlink_status(target, ec));
    if (exists && (!fs::is_directory(target, ec) || !fs::is_regular_file(target / detail::manifest_name, ec)))
        throw checkpoint_error(target.string() +
                               ": exists and is not a pipeprop checkpoint directory; refusing to replace it");
    const fs::path tmp = parent / (target.filename().string() + ".tmp-" + std::to_string(::getpid()));
    try {
        fs::create_directories(parent);
        fs::remove_all(tmp);
        fs::create_directory(tmp);
        for (const auto& t : c.tensors()) {
            const std::string bytes = std::visit([&](const auto& v) { return detail::npy_bytes(t, v); }, t.values);
            detail::write_file_synced(tmp / (t.name + ".npy"), bytes);
            after_file(tmp / (t.name + ".npy"));
        }
        detail::write_file_synced(tmp / detail::manifest_name, detail::manifest_text(c));
        after_file(tmp / detail::manifest_name);
        if (exists) link_user_entries(target, tmp);  // the user's files in <dir> stay (save_directories.hpp)
        detail::sync_directory(tmp);
    } catch (const std::exception& e) {
        fs::remove_all(tmp, ec);
        throw checkpoint_error(target.string() + ": saving the checkpoint failed (previous checkpoint kept): " +
                               e.what());
    }
    if (!exists) {
        if (::rename(tmp.c_str(), target.c_str()) != 0) {
            const std::string err = std::strerror(errno);
            fs::remove_all(tmp, ec);
            throw checkpoint_error(target.string() + ": cannot move the new checkpoint into place: " + err);
        }
    } else {
        bool swapped = false;
#ifdef RENAME_EXCHANGE
        swapped = ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0;
#endif
        if (!swapped) {
            // Filesystem without RENAME_EXCHANGE: move the old one aside, the new one in, then drop the old one.
            const fs::path old = parent / (target.filename().string() + ".old-" + std::to_string(::getpid()));
            fs::remove_all(old, ec);
            if (::rename(target.c_str(), old.c_str()) != 0 || ::rename(tmp.c_str(), target.c_str()) != 0) {
                const std::string err = std::strerror(errno);
                if (!fs::exists(target, ec)) (void)::rename(old.c_str(), target.c_str());
                fs::remove_all(tmp, ec);
                throw checkpoint_error(target.string() + ": cannot move the new checkpoint into place: " + err);
            }
            fs::remove_all(old, ec);
        } else {
            fs::remove_all(tmp, ec);  // now holds the previous checkpoint
        }
    }
    detail::sync_directory(parent);
}
}  // namespace detail

/// Checks that save_checkpoint(c, dir) can create or replace `dir` (followed through symbolic links:
/// resolve_checkpoint_path): `dir` is not an existing path other than a pipeprop checkpoint directory, and a
/// directory can be created where the save creates its temporary one: the check creates and removes
/// <dir>.tmp-<pid> (and the missing directories above it, which it removes again), so that a read-only, virtual or
/// full filesystem is found out the way the save would find it, not by permission bits (access() says yes to root
/// on /proc). For a program that wants to fail before a long run rather than at its first save. Throws
/// checkpoint_error naming the path and the reason.
inline void check_checkpoint_destination(const std::filesystem::path& dir) {
    namespace fs = std::filesystem;
    if (dir.empty()) throw checkpoint_error("pipeprop::check_checkpoint_destination: empty checkpoint path");
    const fs::path target = detail::resolve_checkpoint_path(dir);
    std::error_code ec;
    if (fs::exists(fs::symlink_status(target, ec)) &&
        (!fs::is_directory(target, ec) || !fs::is_regular_file(target / detail::manifest_name, ec)))
        throw checkpoint_error(target.string() +
                               ": exists and is not a pipeprop checkpoint directory; refusing to replace it");
    const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
    // The missing directories above <dir>, outermost last, to remove again after the probe.
    std::vector<fs::path> created;
    fs::path existing = parent;
    for (; !existing.empty() && !fs::exists(fs::symlink_status(existing, ec)); existing = existing.parent_path()) {
        created.push_back(existing);
        if (!existing.has_parent_path() || existing.parent_path() == existing) break;
    }
    if (!existing.empty() && fs::exists(fs::symlink_status(existing, ec)) && !fs::is_directory(existing, ec))
        throw checkpoint_error(target.string() + ": cannot save a checkpoint here: " + existing.string() +
                               " is not a directory");
    const auto cleanup = [&] {
        for (const fs::path& p : created) ::rmdir(p.c_str());
    };
    for (auto it = created.rbegin(); it != created.rend(); ++it) {
        if (::mkdir(it->c_str(), 0777) != 0) {
            const std::string err = std::strerror(errno);
            cleanup();
            throw checkpoint_error(target.string() + ": cannot save a checkpoint here: cannot create the directory " +
                                   it->string() + " (" + err + ")");
        }
    }
    const fs::path probe = parent / (target.filename().string() + ".tmp-" + std::to_string(::getpid()));
    if (::mkdir(probe.c_str(), 0777) != 0 && errno != EEXIST) {
        const std::string err = std::strerror(errno);
        cleanup();
        throw checkpoint_error(target.string() + ": cannot save a checkpoint here: cannot create a directory in " +
                               parent.string() + " (" + err + ")");
    }
    ::rmdir(probe.c_str());
    cleanup();
}

/// Saves `c` as directory `dir` (see the file comment), replacing an earlier checkpoint at `dir` atomically.
/// The manifest (manifest.txt) is line-based text:
///   pipeprop-checkpoint 2
///   layers <L>
///   layer <i> [<tensor>[<dims,...>] ...]          (one line per layer; nothing after i for parameter-free layers)
///   tensor <name> <float32|float64> [<dims,...>] crc32=<8 hex digits>
///                                                 (one line per tensor; its data is <name>.npy; zlib's crc32 of
///                                                 the data bytes after the .npy header)
///   scalar <key> <value>                          (one line per scalar)
///   end
/// Throws checkpoint_error naming the path when `dir` exists but is not a pipeprop checkpoint (it is never
/// replaced), or when writing, syncing or renaming fails; the previous checkpoint then survives unchanged.
/// Also removes the temporary directories of earlier saves to `dir` whose process no longer exists (file comment),
/// after renaming back a <dir>.old-<pid> that holds the only copy (recover_interrupted_save).
/// Files of the user's inside an existing `dir` (a --metrics file, notes: every entry the old manifest does not
/// list) are kept: hard-linked into the new directory before the swap (link_user_entries). A `dir` that is a
/// symbolic link is written through: the link stays and the directory it points to is replaced (its temporary
/// directory is made next to that directory, on its filesystem).
inline void save_checkpoint(const checkpoint& c, const std::filesystem::path& dir) {
    detail::save_checkpoint_impl(c, dir, [](const std::filesystem::path&) {});
}

/// Loads the checkpoint in directory `dir` (when `dir` is missing and a save to it was killed between its two
/// renames, its <dir>.old-<pid> is renamed back first: recover_interrupted_save): parses the manifest, then reads
/// and checks every tensor (.npy format, dtype and shape as the manifest states, and its crc32: a flipped byte, or
/// two files of one shape swapped, is refused naming the tensor). Throws checkpoint_error naming the path when the
/// directory or the manifest is missing, the format tag or version is unknown, a manifest line is malformed, or a
/// tensor file is missing, truncated or does not match the manifest. Version-1 manifests (earlier builds: no
/// checksums) still load, so that a user's existing checkpoints resume; their tensors are checked as before,
/// without a checksum.
[[nodiscard]] inline checkpoint load_checkpoint(const std::filesystem::path& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(dir, ec)) && !dir.empty()) {  // a save killed between its two renames?
        const fs::path target = detail::resolve_checkpoint_path(dir);
        (void)detail::recover_interrupted_save(target.has_parent_path() ? target.parent_path() : fs::path("."),
                                               target.filename().string());
    }
    if (!fs::is_directory(dir, ec)) throw checkpoint_error(dir.string() + ": checkpoint directory not found");
    const fs::path manifest = dir / detail::manifest_name;
    std::ifstream in(manifest);
    if (!in) throw checkpoint_error(dir.string() + ": not a pipeprop checkpoint (no readable manifest.txt)");
    checkpoint c;
    std::string line;
    std::size_t line_no = 0;
    auto bad = [&](const std::string& why) -> checkpoint_error {
        return checkpoint_error(manifest.string() + ":" + std::to_string(line_no) + ": " + why);
    };
    if (!std::getline(in, line)) throw checkpoint_error(manifest.string() + ": empty manifest");
    ++line_no;
    bool with_checksums = false;
    {
        std::istringstream first(line);
        std::string tag;
        int version = 0;
        if (!(first >> tag) || tag != detail::checkpoint_format_tag)
            throw bad("not a pipeprop checkpoint manifest (first line '" + line + "')");
        if (!(first >> version) || version < detail::oldest_checkpoint_format_version ||
            version > detail::checkpoint_format_version)
            throw bad("unsupported checkpoint format version '" + line.substr(tag.size()) + "' (this build reads " +
                      std::to_string(detail::oldest_checkpoint_format_version) + " to " +
                      std::to_string(detail::checkpoint_format_version) + ")");
        with_checksums = version >= 2;
    }
    std::size_t declared_layers = 0;
    bool have_layers = false, ended = false;
    struct pending {
        std::string name, dtype;
        std::vector<std::size_t> shape;
        std::uint32_t crc = 0;
    };
    std::vector<pending> tensors;
    while (std::getline(in, line)) {
        ++line_no;
        if (ended) throw bad("content after 'end'");
        std::istringstream ls(line);
        std::string kind;
        ls >> kind;
        if (kind == "end") {
            ended = true;
        } else if (kind == "layers") {
            if (have_layers || !(ls >> declared_layers)) throw bad("malformed 'layers' line");
            have_layers = true;
        } else if (kind == "layer") {
            std::size_t i = 0;
            if (!have_layers || !(ls >> i) || i != c.signature.layers.size() || i >= declared_layers)
                throw bad("malformed or out-of-order 'layer' line");
            std::vector<tensor_signature> layer;
            std::string tok;
            while (ls >> tok) {
                tensor_signature t;
                if (!detail::parse_named_shape(tok, &t.name, t.shape)) throw bad("malformed tensor '" + tok + "'");
                layer.push_back(std::move(t));
            }
            c.signature.layers.push_back(std::move(layer));
        } else if (kind == "tensor") {
            pending p;
            std::string shape_tok, crc_tok, extra;
            if (!(ls >> p.name >> p.dtype >> shape_tok) || !detail::valid_name(p.name) ||
                (p.dtype != "float32" && p.dtype != "float64") ||
                !detail::parse_named_shape(shape_tok, nullptr, p.shape))
                throw bad("malformed 'tensor' line");
            if (with_checksums && !(ls >> crc_tok && detail::parse_crc32_token(crc_tok, p.crc)))
                throw bad("malformed 'tensor' line (no crc32=<8 hex digits> after the shape)");
            if (ls >> extra) throw bad("malformed 'tensor' line");
            tensors.push_back(std::move(p));
        } else if (kind == "scalar") {
            std::string key;
            if (!(ls >> key) || !detail::valid_name(key)) throw bad("malformed 'scalar' line");
            std::string value;
            std::getline(ls, value);
            if (!value.empty() && value.front() == ' ') value.erase(0, 1);
            c.set_scalar(key, value);
        } else {
            throw bad("unknown entry '" + kind + "'");
        }
    }
    if (!ended) throw checkpoint_error(manifest.string() + ": truncated manifest (no 'end' line)");
    if (c.signature.layers.size() != declared_layers)
        throw checkpoint_error(manifest.string() + ": declares " + std::to_string(declared_layers) + " layers but lists " +
                               std::to_string(c.signature.layers.size()));
    for (const auto& p : tensors) {
        const fs::path file = dir / (p.name + ".npy");
        const auto check = [&](const auto& v) {
            const std::uint32_t crc = detail::values_crc32(v);
            if (with_checksums && crc != p.crc)
                throw checkpoint_error(file.string() + ": tensor '" + p.name + "' does not match its checksum in the "
                                       "manifest (" + detail::crc32_token(crc) + ", the manifest says " +
                                       detail::crc32_token(p.crc) + "): the file is corrupt or holds another "
                                       "tensor's values");
        };
        if (p.dtype == "float32") {
            const auto v = detail::load_npy_values<float>(file, p.shape);
            check(v);
            c.add_tensor<float>(p.name, p.shape, v);
        } else {
            const auto v = detail::load_npy_values<double>(file, p.shape);
            check(v);
            c.add_tensor<double>(p.name, p.shape, v);
        }
    }
    return c;
}

}  // namespace pipeprop

