// pipeprop/checkpoint/save_directories.hpp: the directories around one save of a checkpoint <dir> (see
// pipeprop/checkpoint.hpp, "Atomicity"): where a save really writes (a <dir> that is a symbolic link is written
// through), which entries of an existing <dir> are the user's (kept across the save as hard links), and the
// leftovers of a save killed mid-way (<dir>.tmp-<pid>, <dir>.old-<pid>: removed, or recovered when the old one is
// the only copy left).
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

#include "pipeprop/checkpoint/npy_files.hpp"
#include "pipeprop/checkpoint/signature.hpp"

namespace pipeprop::detail {

/// The path a save to or load from `dir` works on: `dir` without a trailing separator, with the symbolic links of
/// its last component followed (a link to a checkpoint directory elsewhere is written through: the link stays, the
/// directory it names is replaced; a dangling link names where the checkpoint is created). Throws checkpoint_error
/// for a chain of more than 40 links (a loop).
inline std::filesystem::path resolve_checkpoint_path(const std::filesystem::path& dir) {
    namespace fs = std::filesystem;
    fs::path p = dir.has_filename() ? dir : dir.parent_path();
    for (int hops = 0;; ++hops) {
        std::error_code ec;
        if (!fs::is_symlink(fs::symlink_status(p, ec))) return p;
        if (hops == 40) throw checkpoint_error(dir.string() + ": too many levels of symbolic links");
        const fs::path to = fs::read_symlink(p, ec);
        if (ec) throw checkpoint_error(dir.string() + ": cannot read the symbolic link: " + ec.message());
        p = to.is_absolute() ? to : (p.has_parent_path() ? p.parent_path() : fs::path(".")) / to;
        if (!p.has_filename()) p = p.parent_path();
    }
}

/// The pid of a leftover named <name><kind><pid> (kind ".tmp-" or ".old-"), or 0 when `entry` is not one.
inline pid_t leftover_pid(std::string_view entry, const std::string& name, std::string_view kind) {
    const std::string prefix = name + std::string(kind);
    if (entry.size() <= prefix.size() || entry.compare(0, prefix.size(), prefix) != 0) return 0;
    const std::string_view digits = entry.substr(prefix.size());
    long long pid = 0;
    const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (r.ec != std::errc{} || r.ptr != digits.data() + digits.size() || pid <= 0 ||
        pid > std::numeric_limits<pid_t>::max())
        return 0;
    return static_cast<pid_t>(pid);
}

/// True when `pid` names no process (kill(pid, 0) fails with ESRCH) and is not this process.
inline bool process_gone(pid_t pid) noexcept {
    return pid != ::getpid() && ::kill(pid, 0) != 0 && errno == ESRCH;
}

/// A save without RENAME_EXCHANGE moves <parent>/<name> to <name>.old-<pid>, then <name>.tmp-<pid> to <name>; a
/// process killed between the two renames leaves its only copy in <name>.old-<pid>. When <name> does not exist and
/// such a directory of a process that no longer exists holds a manifest, it is renamed back to <name>. Returns true
/// when it did. Best effort (no throw): a failed rename leaves everything as it was.
inline bool recover_interrupted_save(const std::filesystem::path& parent, const std::string& name) noexcept {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (fs::exists(fs::symlink_status(parent / name, ec))) return false;
    for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
        const pid_t pid = leftover_pid(it->path().filename().string(), name, ".old-");
        if (pid == 0 || !process_gone(pid) || !fs::is_regular_file(it->path() / manifest_name, ec)) continue;
        return ::rename(it->path().c_str(), (parent / name).c_str()) == 0;
    }
    return false;
}

/// Removes <parent>/<name>.tmp-<pid> and <name>.old-<pid> left by saves in processes that no longer exist (a kill
/// during a save), after recover_interrupted_save: an .old-<pid> is removed only while <name> exists (it then holds
/// the newer checkpoint). Keeps this process's, a live process's, and everything else. Best effort (no throw).
inline void remove_stale_save_directories(const std::filesystem::path& parent, const std::string& name) noexcept {
    namespace fs = std::filesystem;
    recover_interrupted_save(parent, name);
    std::error_code ec;
    const bool target_exists = fs::exists(fs::symlink_status(parent / name, ec));
    for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string entry = it->path().filename().string();
        pid_t pid = leftover_pid(entry, name, ".tmp-");
        if (pid == 0 && target_exists) pid = leftover_pid(entry, name, ".old-");
        if (pid != 0 && process_gone(pid)) {
            std::error_code rm;
            fs::remove_all(it->path(), rm);
        }
    }
}

/// The names of the checkpoint's own entries in an existing checkpoint directory `dir`: manifest.txt and
/// <tensor>.npy for each tensor line of its manifest (every *.npy entry when the manifest cannot be read).
inline std::set<std::string> checkpoint_entries(const std::filesystem::path& dir) {
    std::set<std::string> own{manifest_name};
    std::ifstream in(dir / manifest_name);
    std::string line;
    bool read_any = false;
    while (in && std::getline(in, line)) {
        read_any = true;
        std::istringstream ls(line);
        std::string kind, name;
        if (ls >> kind >> name && kind == "tensor") own.insert(name + ".npy");
    }
    if (!read_any) {
        std::error_code ec;
        for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
            if (it->path().extension() == ".npy") own.insert(it->path().filename().string());
    }
    return own;
}

/// Gives every entry of the existing checkpoint directory `old_dir` that is not the checkpoint's own (a metrics
/// file, a trace, notes: checkpoint_entries) a second name in `new_dir`: regular files, symbolic links and other
/// non-directories are hard-linked (link() keeps the inode, so a file this process still writes goes on growing
/// under both names), directories are recreated and their content linked. So a save that replaces `old_dir` by
/// `new_dir` never removes the last name of a user's file, even if killed between any two steps. Throws
/// checkpoint_error when an entry's name is one of the new checkpoint's files, or a link cannot be made (e.g. a
/// filesystem without hard links): the save then fails and the previous checkpoint stays.
inline void link_user_entries(const std::filesystem::path& old_dir, const std::filesystem::path& new_dir) {
    namespace fs = std::filesystem;
    const std::set<std::string> own = checkpoint_entries(old_dir);
    const auto link_one = [&](const fs::path& from, const fs::path& to) {
        if (::linkat(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), 0) != 0)
            throw checkpoint_error(from.string() + ": cannot keep this file across the save (hard link to " +
                                   to.string() + " failed: " + std::strerror(errno) +
                                   "); move it out of the checkpoint directory");
    };
    std::error_code ec;
    for (fs::directory_iterator it(old_dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string entry = it->path().filename().string();
        if (own.count(entry) != 0) continue;
        const fs::path to = new_dir / entry;
        std::error_code ec2;
        if (fs::exists(fs::symlink_status(to, ec2)))
            throw checkpoint_error(it->path().string() + ": a file of yours has the name of one of the new "
                                                         "checkpoint's files; move it out of the checkpoint directory");
        if (!fs::is_directory(fs::symlink_status(it->path(), ec2))) {
            link_one(it->path(), to);
            continue;
        }
        fs::create_directory(to);
        for (fs::recursive_directory_iterator r(it->path()), rend; r != rend; ++r) {
            const fs::path dest = to / fs::relative(r->path(), it->path());
            if (r->is_directory() && !r->is_symlink()) fs::create_directory(dest);
            else link_one(r->path(), dest);
        }
    }
    if (ec) throw checkpoint_error(old_dir.string() + ": cannot list the checkpoint directory: " + ec.message());
}

}  // namespace pipeprop::detail
