// pipeprop/checkpoint/npy_files.hpp: the files of a checkpoint directory: .npy tensors (xtensor's npy I/O; every
// header parsed and checked against the manifest and the file size before anything it declares is allocated, and
// before xtensor's parser sees it) and the text manifest with a zlib crc32 per tensor; fsync'ed writes.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

#include <xtensor/xadapt.hpp>
#include <xtensor/xnpy.hpp>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "pipeprop/checkpoint/content.hpp"
#include "pipeprop/checkpoint/signature.hpp"

namespace pipeprop {

namespace detail {

inline constexpr std::string_view checkpoint_format_tag = "pipeprop-checkpoint";
/// The manifest format this build writes. Version 2 adds a crc32 to every tensor line; version 1 manifests (no
/// checksums: written by earlier builds) are still read, their tensors checked for format, dtype and shape only.
inline constexpr int checkpoint_format_version = 2;
inline constexpr int oldest_checkpoint_format_version = 1;
inline constexpr const char* manifest_name = "manifest.txt";

/// Writes bytes to path and fsyncs the file. Throws checkpoint_error naming the file and errno's text.
inline void write_file_synced(const std::filesystem::path& path, std::string_view bytes) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw checkpoint_error(path.string() + ": cannot create file: " + std::strerror(errno));
    std::size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const std::string err = std::strerror(errno);
            ::close(fd);
            throw checkpoint_error(path.string() + ": write failed: " + err);
        }
        done += static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0) {
        const std::string err = std::strerror(errno);
        ::close(fd);
        throw checkpoint_error(path.string() + ": fsync failed: " + err);
    }
    if (::close(fd) != 0) throw checkpoint_error(path.string() + ": close failed: " + std::strerror(errno));
}

/// fsync of a directory (makes renames and new entries durable); best effort.
inline void sync_directory(const std::filesystem::path& dir) noexcept {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)::fsync(fd);
        ::close(fd);
    }
}

template <class T>
std::string npy_bytes(const checkpoint_tensor& t, const std::vector<T>& v) {
    auto view = xt::adapt(v.data(), v.size(), xt::no_ownership(), t.shape);
    return xt::dump_npy(view);
}

/// zlib's crc32 of a tensor's values as the .npy file stores them after its header (little-endian float32 /
/// float64: the in-memory bytes on the little-endian hosts pipeprop runs on).
template <class T>
std::uint32_t values_crc32(const std::vector<T>& v) {
    const auto* bytes = reinterpret_cast<const Bytef*>(v.data());
    return static_cast<std::uint32_t>(::crc32_z(::crc32_z(0L, Z_NULL, 0), bytes, v.size() * sizeof(T)));
}
inline std::uint32_t tensor_crc32(const checkpoint_tensor& t) {
    return std::visit([](const auto& v) { return values_crc32(v); }, t.values);
}

/// "crc32=" and the checksum as 8 lowercase hex digits (a manifest tensor line's last token).
inline std::string crc32_token(std::uint32_t crc) {
    char hex[9] = {};
    std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(crc));
    return std::string("crc32=") + hex;
}

/// Parses crc32_token's text; false for anything else.
inline bool parse_crc32_token(std::string_view tok, std::uint32_t& crc) {
    constexpr std::string_view prefix = "crc32=";
    if (tok.size() != prefix.size() + 8 || tok.substr(0, prefix.size()) != prefix) return false;
    const std::string_view hex = tok.substr(prefix.size());
    for (const char ch : hex)
        if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return false;
    const auto r = std::from_chars(hex.data(), hex.data() + hex.size(), crc, 16);
    return r.ec == std::errc{} && r.ptr == hex.data() + hex.size();
}

inline std::string manifest_text(const checkpoint& c) {
    std::ostringstream m;
    m << checkpoint_format_tag << ' ' << checkpoint_format_version << '\n';
    m << "layers " << c.signature.layer_count() << '\n';
    for (std::size_t i = 0; i < c.signature.layer_count(); ++i) {
        m << "layer " << i;
        for (const auto& t : c.signature.layers[i]) m << ' ' << t.name << shape_to_string(t.shape);
        m << '\n';
    }
    for (const auto& t : c.tensors())
        m << "tensor " << t.name << ' ' << t.dtype() << ' ' << shape_to_string(t.shape) << ' '
          << crc32_token(tensor_crc32(t)) << '\n';
    for (const auto& [k, v] : c.scalars()) m << "scalar " << k << ' ' << v << '\n';
    m << "end\n";
    return m.str();
}

/// Parses "name[d0,d1,...]" (or "[...]" alone when name_out is null).
inline bool parse_named_shape(std::string_view tok, std::string* name_out, std::vector<std::size_t>& shape) {
    const auto open = tok.find('[');
    if (open == std::string_view::npos || tok.back() != ']') return false;
    if (name_out != nullptr) {
        *name_out = std::string(tok.substr(0, open));
        if (!valid_name(*name_out)) return false;
    } else if (open != 0) {
        return false;
    }
    std::string_view dims = tok.substr(open + 1, tok.size() - open - 2);
    shape.clear();
    while (!dims.empty()) {
        const auto comma = dims.find(',');
        const std::string_view d = dims.substr(0, comma);
        std::size_t v = 0;
        const auto r = std::from_chars(d.data(), d.data() + d.size(), v);
        if (r.ec != std::errc{} || r.ptr != d.data() + d.size()) return false;
        shape.push_back(v);
        if (comma == std::string_view::npos) break;
        dims.remove_prefix(comma + 1);
        if (dims.empty()) return false;
    }
    return true;
}

/// The parts of a .npy header (NEP 1: magic "\x93NUMPY", version 1.0 / 2.0 / 3.0, little-endian header length,
/// then a Python dict literal) that decide how many bytes follow: dtype text and shape.
struct npy_header {
    std::size_t data_offset = 0;  ///< bytes before the data
    std::string descr;            ///< e.g. "<f4"
    std::vector<std::size_t> shape;
};

/// Reads and parses the .npy header of `file` (of `file_size` bytes) without allocating anything the header
/// declares beyond the header text itself, whose length is checked against the file size first. Throws
/// checkpoint_error naming the file for a malformed header.
inline npy_header read_npy_header(const std::filesystem::path& file, std::uintmax_t file_size,
                                  std::string_view dtype_name) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw checkpoint_error(file.string() + ": cannot open the file");
    auto bad = [&](const std::string& why) {
        return checkpoint_error(file.string() + ": not a valid " + std::string(dtype_name) + " .npy file (" + why + ")");
    };
    unsigned char pre[12] = {};
    in.read(reinterpret_cast<char*>(pre), 10);
    if (in.gcount() != 10 || std::memcmp(pre, "\x93NUMPY", 6) != 0) throw bad("no .npy magic string");
    npy_header h;
    std::uintmax_t header_len = 0;
    if (pre[6] == 1 && pre[7] == 0) {
        header_len = std::uintmax_t(pre[8]) | (std::uintmax_t(pre[9]) << 8);
        h.data_offset = 10;
    } else if ((pre[6] == 2 || pre[6] == 3) && pre[7] == 0) {
        in.read(reinterpret_cast<char*>(pre + 10), 2);
        if (in.gcount() != 2) throw bad("truncated header");
        header_len = std::uintmax_t(pre[8]) | (std::uintmax_t(pre[9]) << 8) | (std::uintmax_t(pre[10]) << 16) |
                     (std::uintmax_t(pre[11]) << 24);
        h.data_offset = 12;
    } else {
        throw bad("unsupported format version " + std::to_string(pre[6]) + "." + std::to_string(pre[7]));
    }
    if (header_len > file_size - h.data_offset)
        throw bad("the header length " + std::to_string(header_len) + " exceeds the file size " +
                  std::to_string(file_size));
    std::string text(static_cast<std::size_t>(header_len), '\0');
    in.read(text.data(), static_cast<std::streamsize>(header_len));
    if (static_cast<std::uintmax_t>(in.gcount()) != header_len) throw bad("truncated header");
    h.data_offset += static_cast<std::size_t>(header_len);
    // The dictionary as xtensor's header parser needs it (its helpers index the first and last character of each
    // piece: a malformed header must be refused here, before it gets there): "{...}\n" with the keys 'descr',
    // 'fortran_order', 'shape' in this order, each followed by ':' and a value; fortran_order False.
    {
        if (text.empty() || text.back() != '\n') throw bad("the header does not end with a newline");
        std::string dict;
        for (const char ch : std::string_view(text).substr(0, text.size() - 1))
            if (ch != ' ') dict += ch;
        if (dict.size() < 2 || dict.front() != '{' || dict.back() != '}')
            throw bad("the header is not a {...} dictionary");
        const std::string_view keys[] = {"'descr'", "'fortran_order'", "'shape'"};
        std::size_t pos[3] = {};
        for (int k = 0; k < 3; ++k) {
            pos[k] = dict.find(keys[k]);
            if (pos[k] == std::string::npos) throw bad("no " + std::string(keys[k]) + " key in the header");
            if (k > 0 && pos[k] <= pos[k - 1]) throw bad("the header keys are not in the order descr, fortran_order, shape");
        }
        for (int k = 0; k < 3; ++k) {
            const std::size_t colon = pos[k] + keys[k].size();
            const std::size_t end = k < 2 ? pos[k + 1] : dict.size() - 1;
            std::string_view value = std::string_view(dict).substr(colon, end > colon ? end - colon : 0);
            if (value.empty() || value.front() != ':')
                throw bad("no ':' after " + std::string(keys[k]) + " in the header");
            value.remove_prefix(1);
            if (!value.empty() && value.back() == ',') value.remove_suffix(1);
            const bool ok = k == 0   ? value.size() >= 2 && value.front() == '\'' && value.back() == '\''
                            : k == 1 ? value == "False"
                                     : value.size() >= 2 && value.front() == '(' && value.back() == ')';
            if (!ok)
                throw bad(k == 1 ? std::string("fortran_order must be False (C order)")
                                 : "malformed " + std::string(keys[k]) + " value in the header");
        }
    }
    // 'descr': '<f4'
    const auto d = text.find("'descr'");
    const auto q1 = d == std::string::npos ? d : text.find('\'', text.find(':', d));
    const auto q2 = q1 == std::string::npos ? q1 : text.find('\'', q1 + 1);
    if (q2 == std::string::npos) throw bad("no 'descr' in the header");
    h.descr = text.substr(q1 + 1, q2 - q1 - 1);
    // 'shape': (d0, d1, ...)
    const auto s = text.find("'shape'");
    const auto open = s == std::string::npos ? s : text.find('(', s);
    const auto close = open == std::string::npos ? open : text.find(')', open);
    if (close == std::string::npos) throw bad("no 'shape' in the header");
    std::string_view dims(text.data() + open + 1, close - open - 1);
    while (!dims.empty()) {
        while (!dims.empty() && dims.front() == ' ') dims.remove_prefix(1);
        if (dims.empty()) break;
        std::size_t v = 0;
        const auto r = std::from_chars(dims.data(), dims.data() + dims.size(), v);
        if (r.ec != std::errc{}) throw bad("malformed shape in the header");
        h.shape.push_back(v);
        dims.remove_prefix(static_cast<std::size_t>(r.ptr - dims.data()));
        while (!dims.empty() && dims.front() == ' ') dims.remove_prefix(1);
        if (!dims.empty() && dims.front() != ',') throw bad("malformed shape in the header");
        if (!dims.empty()) dims.remove_prefix(1);
    }
    return h;
}

/// Loads the values of a .npy file that the manifest lists with dtype T and `shape`. Before xtensor reads the file
/// (and allocates what its header declares), the header is parsed and checked: dtype, shape equal to the manifest's,
/// and header + data size exactly the file size (overflow-checked). So a lying header allocates nothing.
template <class T>
std::vector<T> load_npy_values(const std::filesystem::path& file, const std::vector<std::size_t>& shape) {
    std::error_code ec;
    const auto file_size = std::filesystem::file_size(file, ec);
    if (ec) throw checkpoint_error(file.string() + ": missing tensor file (" + ec.message() + ")");
    std::size_t n = 0, data_bytes = 0;
    if (!checked_shape_size(shape, n) || __builtin_mul_overflow(n, sizeof(T), &data_bytes))
        throw checkpoint_error(file.string() + ": the manifest's shape " + shape_to_string(shape) +
                               " overflows the address space");
    if (file_size < data_bytes + 10)
        throw checkpoint_error(file.string() + ": truncated .npy file (" + std::to_string(file_size) +
                               " bytes for " + std::to_string(n) + " values)");
    const npy_header h = read_npy_header(file, file_size, std::is_same_v<T, float> ? "float32" : "float64");
    const char* want_descr = std::is_same_v<T, float> ? "<f4" : "<f8";
    if (h.descr != want_descr)
        throw checkpoint_error(file.string() + ": dtype '" + h.descr + "' in the .npy header, the manifest says " +
                               (std::is_same_v<T, float> ? "float32 ('<f4')" : "float64 ('<f8')"));
    if (h.shape != shape)
        throw checkpoint_error(file.string() + ": the .npy header declares shape " + shape_to_string(h.shape) +
                               ", the manifest " + shape_to_string(shape));
    if (file_size != h.data_offset + data_bytes)
        throw checkpoint_error(file.string() + ": " + std::to_string(file_size) + " bytes, but its header (" +
                               std::to_string(h.data_offset) + " bytes) and " + std::to_string(n) + " values need " +
                               std::to_string(h.data_offset + data_bytes) + " (truncated .npy file, or bytes after it)");
    std::ifstream in(file, std::ios::binary);
    if (!in) throw checkpoint_error(file.string() + ": cannot open the file");
    try {
        auto arr = xt::load_npy<T>(in);
        if (!in) throw checkpoint_error(file.string() + ": truncated .npy file");
        const std::vector<std::size_t> got(arr.shape().begin(), arr.shape().end());
        if (got != shape)
            throw checkpoint_error(file.string() + ": shape " + shape_to_string(got) + " differs from the manifest's " +
                                   shape_to_string(shape));
        return std::vector<T>(arr.begin(), arr.end());
    } catch (const checkpoint_error&) {
        throw;
    } catch (const std::exception& e) {
        throw checkpoint_error(file.string() + ": not a valid " + (std::is_same_v<T, float> ? "float32" : "float64") +
                               " .npy file (" + e.what() + ")");
    }
}

}  // namespace detail

}  // namespace pipeprop
