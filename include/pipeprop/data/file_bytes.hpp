// pipeprop/data/file_bytes.hpp: read a file (plain or gzip, decompressed transparently with zlib) as a stream of
// bytes (file_byte_stream: a reader reads its header first and then exactly the bytes the header implies) or whole
// (read_file_bytes).
#pragma once

#include <zlib.h>

#include <algorithm>
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
[[gnu::cold]] inline std::string zlib_problem(gzFile file, const std::string& name) {
    int errnum = Z_OK;
    const char* msg = gzerror(file, &errnum);
    std::string m = msg != nullptr ? msg : "unknown zlib error";
    if (m.rfind(name + ": ", 0) == 0) m.erase(0, name.size() + 2);
    return "truncated or corrupt gzip data (" + m + ")";
}
}  // namespace detail

/// Sequential reader of a plain or gzip file (zlib's gzread passes non-gzip data through unchanged). Reads never
/// allocate more than they return, so a reader that reads a header first and then only the bytes the header implies
/// is not exposed to a decompression bomb. Setup-time class (allocates); not thread-safe.
class file_byte_stream {
public:
    /// Opens `path`. Throws data_error naming the file when it does not exist, is not a regular file or cannot be
    /// opened.
    explicit file_byte_stream(const std::filesystem::path& path) : name_(path.string()) {
        std::error_code ec;
        const auto status = std::filesystem::status(path, ec);
        if (ec || !std::filesystem::exists(status)) throw data_error(name_ + ": file not found");
        if (!std::filesystem::is_regular_file(status)) throw data_error(name_ + ": not a regular file");
        file_size_ = std::filesystem::file_size(path, ec);
        if (ec) throw data_error(name_ + ": cannot read the file size (" + ec.message() + ")");
        file_ = gzopen(name_.c_str(), "rb");
        if (file_ == nullptr) throw data_error(name_ + ": cannot open the file for reading");
        gzbuffer(file_, 1u << 17);
    }
    file_byte_stream(const file_byte_stream&) = delete;
    file_byte_stream& operator=(const file_byte_stream&) = delete;
    ~file_byte_stream() {
        if (file_ != nullptr) (void)gzclose(file_);
    }

    [[nodiscard]] const std::string& name() const noexcept { return name_; }  ///< The file's path (messages).
    /// Size of the file on disk in bytes (compressed size for a gzip file).
    [[nodiscard]] std::uintmax_t file_size() const noexcept { return file_size_; }
    /// True when the file is gzip data (decompressed by reads). Valid after the first read.
    [[nodiscard]] bool is_gzip() const noexcept { return gzdirect(file_) == 0; }
    /// Upper bound of the bytes the file can yield: its size when plain; when gzip, 1032 times the compressed size
    /// (deflate's maximal compression ratio, zlib's FAQ) plus 64 KiB. Valid after the first read.
    [[nodiscard]] std::uintmax_t max_content_bytes() const noexcept {
        if (!is_gzip()) return file_size_;
        constexpr std::uintmax_t ratio = 1032;
        return file_size_ > (UINTMAX_MAX - 65536) / ratio ? UINTMAX_MAX : file_size_ * ratio + 65536;
    }

    /// Reads up to n bytes into dst; returns how many were read (fewer only at the end of the data). Throws
    /// data_error naming the file for truncated or corrupt gzip data.
    std::size_t read(std::uint8_t* dst, std::size_t n) {
        std::size_t done = 0;
        while (done < n) {
            const auto want = static_cast<unsigned>(std::min<std::size_t>(n - done, std::size_t(1) << 30));
            const int got = gzread(file_, dst + done, want);
            if (got < 0) throw data_error(name_ + ": " + detail::zlib_problem(file_, name_));
            if (got == 0) {
                int errnum = Z_OK;
                (void)gzerror(file_, &errnum);
                if (errnum != Z_OK && errnum != Z_STREAM_END)
                    throw data_error(name_ + ": " + detail::zlib_problem(file_, name_));
                break;
            }
            done += static_cast<std::size_t>(got);
        }
        return done;
    }

    /// Appends exactly n bytes to out, growing it in steps of at most 1 MiB as data arrives (a file that ends early
    /// never makes it allocate n). Returns false when the data end first (out then holds what there was).
    /// Throws as read().
    bool append_exactly(std::vector<std::uint8_t>& out, std::size_t n) {
        constexpr std::size_t chunk = std::size_t(1) << 20;
        while (n > 0) {
            const std::size_t step = std::min(n, chunk), old = out.size();
            out.resize(old + step);
            const std::size_t got = read(out.data() + old, step);
            out.resize(old + got);
            if (got < step) return false;
            n -= step;
        }
        return true;
    }

    /// True when no byte is left. Throws as read().
    [[nodiscard]] bool at_end() {
        std::uint8_t b = 0;
        return read(&b, 1) == 0;
    }

    /// Closes the file and reports a gzip stream that ended early (zlib reports it only here). Throws data_error.
    void close() {
        const int closed = gzclose(file_);
        file_ = nullptr;
        if (closed == Z_BUF_ERROR) throw data_error(name_ + ": gzip stream is truncated (unexpected end of file)");
        if (closed != Z_OK)
            throw data_error(name_ + ": error while closing the file (zlib code " + std::to_string(closed) + ")");
    }

private:
    std::string name_;
    std::uintmax_t file_size_ = 0;
    gzFile file_ = nullptr;
};

/// Reads the whole content of `path`. A gzip file (any name) is decompressed; any other file is returned as stored
/// (zlib's gzread passes non-gzip data through unchanged). Setup-time function: allocates.
/// Throws data_error naming the file when it does not exist, is not a regular file, cannot be opened or read, or is a
/// gzip stream that is truncated or corrupt.
[[nodiscard, gnu::cold]] inline std::vector<std::uint8_t> read_file_bytes(const std::filesystem::path& path) {
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
