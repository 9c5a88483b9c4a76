// examples/train/memory_check.hpp: before a pipelined engine is built, its memory estimate
// (pipeprop/memory_estimate.hpp: the bytes its buffers will hold, computed from its type, cut and options) against the
// memory this process can still get: the smaller of MemAvailable + SwapFree (/proc/meminfo) and what the address-space and data limits
// (getrlimit RLIMIT_AS / RLIMIT_DATA, `ulimit -v` / `ulimit -d`) leave above what the process already uses
// (VmSize / VmData of /proc/self/status). A run whose engine cannot fit is refused before anything is allocated, with
// the estimate, its parts, what is available and the options of that mode that lower it; --memory-check off skips
// the check. The estimate counts the buffers' payload only, so a refused run could not have fitted; one that passes
// may still run out of memory elsewhere (the data, the threads), which main reports with train/activity.hpp.
#pragma once

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <pipeprop/memory_estimate.hpp>

#include "train/options.hpp"
#include "train/training_loop.hpp"

namespace train {

/// The engine does not fit in the memory the process can get (main: exit 1 with the message).
class memory_refused : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// Bytes as "7.9 GB", "350.2 MB" or "12.0 kB" (decimal units).
[[nodiscard]] inline std::string byte_text(std::uint64_t bytes) {
    const double b = static_cast<double>(bytes);
    if (b >= 1e9) return fmt::format("{:.1f} GB", b / 1e9);
    if (b >= 1e6) return fmt::format("{:.1f} MB", b / 1e6);
    return fmt::format("{:.1f} kB", b / 1e3);
}

/// What this process can still allocate, and what limits it.
struct available_memory {
    std::uint64_t bytes = std::numeric_limits<std::uint64_t>::max();  ///< max(): nothing known limits it
    std::string limited_by;  ///< e.g. "MemAvailable + SwapFree of /proc/meminfo"
};

namespace detail {
/// Reads the line "<key>: <n> kB" of a /proc file into bytes (n times 1024); false when there is none.
inline bool proc_kb(const char* path, const std::string& key, std::uint64_t& bytes) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
        if (line.compare(0, key.size() + 1, key + ":") != 0) continue;
        std::istringstream fields(line.substr(key.size() + 1));
        std::uint64_t kb = 0;
        if (!(fields >> kb)) return false;
        bytes = kb * 1024;
        return true;
    }
    return false;
}
}  // namespace detail

/// The smaller of the machine's available memory and what the address-space / data limits leave (file comment).
[[nodiscard]] inline available_memory memory_available() {
    available_memory a;
    const auto lower = [&](std::uint64_t bytes, std::string why) {
        if (bytes < a.bytes) a = {bytes, std::move(why)};
    };
    std::uint64_t mem = 0, swap = 0;
    if (detail::proc_kb("/proc/meminfo", "MemAvailable", mem)) {
        (void)detail::proc_kb("/proc/meminfo", "SwapFree", swap);
        lower(mem + swap, swap > 0 ? "MemAvailable + SwapFree of /proc/meminfo" : "MemAvailable of /proc/meminfo");
    }
    const auto limit = [&](int resource, const char* status_key, const char* name) {
        rlimit l{};
        if (getrlimit(resource, &l) != 0 || l.rlim_cur == RLIM_INFINITY) return;
        std::uint64_t used = 0;
        (void)detail::proc_kb("/proc/self/status", status_key, used);
        const std::uint64_t cap = l.rlim_cur;
        lower(cap > used ? cap - used : 0,
              fmt::format("{} of {} less the {} this process uses", name, byte_text(cap), byte_text(used)));
    };
    limit(RLIMIT_AS, "VmSize", "the address-space limit (ulimit -v)");
    limit(RLIMIT_DATA, "VmData", "the data-segment limit (ulimit -d)");
    return a;
}

/// The estimate's parts as "activations and stashes 6.1 GB over 56 stages, weights 1.2 GB, ...".
[[nodiscard]] inline std::string estimate_parts(const pipeprop::memory_estimate& e) {
    std::string text = fmt::format("activations and stashes {} over {} stage{}, weights and optimizer state {}",
                                   byte_text(e.activation_bytes()), e.stages.size(), e.stages.size() == 1 ? "" : "s",
                                   byte_text(e.weight_bytes()));
    if (e.channel_bytes() > 0) text += fmt::format(", boundary channels {}", byte_text(e.channel_bytes()));
    if (e.workspace_bytes() > 0) text += fmt::format(", workspaces {}", byte_text(e.workspace_bytes()));
    return text + fmt::format(", evaluation buffers {}", byte_text(e.evaluation_bytes));
}

/// Notes the estimate of `engine` (e.g. "PB engine") and, unless --memory-check off, throws memory_refused when its
/// peak exceeds memory_available(): "the PB engine needs about ... ; lower it with <remedies>". remedies: the
/// options of the mode that lower it, e.g. {"--executor sequential (one slot per stage, no channels)", ...}.
inline void check_memory(const common_options& o, const std::string& engine, const pipeprop::memory_estimate& e,
                         const std::vector<std::string>& remedies) {
    const std::uint64_t need = e.peak_bytes();
    const available_memory a = memory_available();
    note(o, fmt::format("memory: the {} needs about {} ({}); {} available", engine, byte_text(need), estimate_parts(e),
                        a.bytes == std::numeric_limits<std::uint64_t>::max() ? std::string("no limit known")
                                                                             : byte_text(a.bytes) + " are"));
    if (o.memory_check == "off" || need <= a.bytes) return;
    std::string lower;
    for (std::size_t i = 0; i < remedies.size(); ++i)
        lower += (i == 0 ? "" : i + 1 == remedies.size() ? " or " : ", ") + remedies[i];
    throw memory_refused(fmt::format(
        "the {} needs about {} ({}), {} are available ({}); lower it with {}, or allow more memory (ulimit -v, the "
        "machine's RAM). Nothing was allocated for it; --memory-check off skips this check.",
        engine, byte_text(need), estimate_parts(e), byte_text(a.bytes), a.limited_by,
        lower.empty() ? "a smaller network" : lower));
}

}  // namespace train
