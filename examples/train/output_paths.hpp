// examples/train/output_paths.hpp: checks, before the data are loaded and training starts, that the main program can
// write its output files (--metrics, --checkpoint-out, a mode's own such as --trace) by creating or opening them, so
// that a bad path fails in a second (exit 2, the option and the path named) instead of after training.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "pipeprop/checkpoint.hpp"
#include "train/options.hpp"
#include "train/rank_checkpoints.hpp"

namespace train {

/// Throws std::runtime_error "<option>: cannot write <path>: <reason>" unless `path` can be written as a regular
/// file, found out by doing it, not by permission bits (access() says yes to root on /proc): an existing one must be
/// a non-directory that opens for writing (it is not truncated here); a new one is created (O_CREAT | O_EXCL) and
/// removed again, in an existing directory (the program does not create directories for files).
inline void check_writable_file(const std::string& option, const std::string& path) {
    namespace fs = std::filesystem;
    auto fail = [&](const std::string& why) {
        return std::runtime_error(fmt::format("{}: cannot write {}: {}", option, path, why));
    };
    if (path.empty()) throw fail("empty path");
    std::error_code ec;
    const auto st = fs::status(path, ec);
    if (fs::exists(st)) {
        if (fs::is_directory(st)) throw fail("it is a directory");
        const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd < 0) throw fail(std::strerror(errno));
        ::close(fd);
        return;
    }
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
        throw fail(ec.message());  // ENOTDIR: a parent is not a directory, reported below
    const fs::path parent = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
    const auto pst = fs::status(parent, ec);
    if (!fs::exists(pst)) throw fail(fmt::format("the directory {} does not exist", parent.string()));
    if (!fs::is_directory(pst)) throw fail(fmt::format("{} is not a directory", parent.string()));
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        if (errno == EEXIST) {  // a link to a missing file (created through the link, left empty), or a race
            const int through = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
            if (through < 0) throw fail(std::strerror(errno));
            ::close(through);
            return;
        }
        throw fail(fmt::format("cannot create a file in {} ({})", parent.string(), std::strerror(errno)));
    }
    ::close(fd);
    ::unlink(path.c_str());
}

/// The shared output options: --metrics (a file) and --checkpoint-out (pipeprop::check_checkpoint_destination, which
/// creates and removes a directory where the save would). Throws std::runtime_error or pipeprop::checkpoint_error
/// naming the option and the path (the program reports it as a bad option: exit 2).
inline void check_output_paths(const common_options& o) {
    if (!o.metrics.empty()) check_writable_file("--metrics", o.metrics);
    if (!o.checkpoint_out.empty()) {
        try {
            if (o.transport == "mpi")
                check_rank_checkpoint_destination(o.checkpoint_out);  // train/rank_checkpoints.hpp
            else
                pipeprop::check_checkpoint_destination(o.checkpoint_out);
        } catch (const pipeprop::checkpoint_error& e) {
            throw pipeprop::checkpoint_error(std::string("--checkpoint-out: ") + e.what());
        }
    }
}

}  // namespace train
