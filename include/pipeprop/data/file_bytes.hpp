// pipeprop/data/file_bytes.hpp: read a whole file into memory, transparently decompressing gzip (zlib).
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "pipeprop/data/data_error.hpp"

namespace pipeprop::data {

namespace detail {
/// zlib's error text without the "<path>: " prefix gzerror puts in front of it.
inline std::string zlib_problem(gzFile file, const std::string& name) {
    int errnum = Z_OK;
    const char* msg = gzerror(file, &errnum);
    std::string m = msg != nullptr ? msg : "unknown zlib error";
    if (m.rfind(name + ": ", 0) == 0) m.erase(0, name.size() + 2);
    return "truncated or corrupt gzip data (" + m + ")";
}
}  // namespace detail

/// Reads the whole content of `path`. A gzip file (any name) is decompressed; any other file is returned as stored
/// (zlib's gzread passes non-gzip data through unchanged). Setup-time function: allocates.
/// Throws data_error naming the file when it does not exist, is not a regular file, cannot be opened or read, or is a
/// gzip stream that is truncated or corrupt.
[[nodiscard]] inline std::vector<std::uint8_t> read_file_bytes(const std::filesystem::path& path) {
    const std::string name = path.string();
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::exists(status)) throw data_error(name + ": file not found");
    if (!std::filesystem::is_regular_file(status)) throw data_error(name + ": not a regular file");
    gzFile file = gzopen(name.c_str(), "rb");
    if (file == nullptr) throw data_error(name + ": cannot open the file for reading");
    gzbuffer(file, 1u << 17);
    std::vector<std::uint8_t> bytes;
    constexpr std::size_t chunk = std::size_t(1) << 20;
    std::string problem;
    for (;;) {
        const std::size_t old = bytes.size();
        bytes.resize(old + chunk);
        const int got = gzread(file, bytes.data() + old, static_cast<unsigned>(chunk));
        if (got < 0) {
            problem = detail::zlib_problem(file, name);
            bytes.resize(old);
            break;
        }
        bytes.resize(old + static_cast<std::size_t>(got));
        if (got == 0) break;
    }
    if (problem.empty()) {
        int errnum = Z_OK;
        (void)gzerror(file, &errnum);
        if (errnum != Z_OK && errnum != Z_STREAM_END) problem = detail::zlib_problem(file, name);
    }
    const int closed = gzclose(file);
    if (problem.empty() && closed == Z_BUF_ERROR) problem = "gzip stream is truncated (unexpected end of file)";
    else if (problem.empty() && closed != Z_OK) problem = "error while closing the file (zlib code " +
                                                          std::to_string(closed) + ")";
    if (!problem.empty()) throw data_error(name + ": " + problem);
    bytes.shrink_to_fit();
    return bytes;
}

}  // namespace pipeprop::data
