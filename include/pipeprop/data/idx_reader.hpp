// pipeprop/data/idx_reader.hpp: reader for the IDX files of MNIST and Fashion-MNIST (plain or gzip).
//
// IDX format (LeCun et al., http://yann.lecun.com/exdb/mnist/): bytes 0-1 are zero, byte 2 the element type
// (0x08 = unsigned byte, the only type the MNIST family uses), byte 3 the number of dimensions d; then d big-endian
// uint32 sizes; then the elements, row-major. Images: d = 3, [count, rows, cols]; labels: d = 1, [count].
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "pipeprop/data/data_error.hpp"
#include "pipeprop/data/file_bytes.hpp"

namespace pipeprop::data {

/// Images of one IDX file: `pixels` holds count * rows * cols bytes, image-major, row-major inside an image
/// ([count, 1, rows, cols] as a one-channel tensor). `path` is the file they came from (for later messages).
struct idx_images {
    std::size_t count = 0;
    std::size_t rows = 0;
    std::size_t cols = 0;
    std::vector<std::uint8_t> pixels;
    std::string path;
};

namespace detail {

inline std::uint32_t read_be32(const std::uint8_t* p) noexcept {
    return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) | std::uint32_t(p[3]);
}

/// Checks the IDX header of `bytes` (from file `name`) for `want_dims` dimensions of unsigned bytes and that the
/// file size equals header + product of the dimensions; returns the dimensions.
inline std::vector<std::size_t> parse_idx_header(const std::vector<std::uint8_t>& bytes, const std::string& name,
                                                 std::size_t want_dims, const char* what) {
    if (bytes.size() < 4)
        throw data_error(name + ": truncated IDX file (" + std::to_string(bytes.size()) +
                         " bytes, shorter than the 4-byte magic number)");
    if (bytes[0] != 0 || bytes[1] != 0)
        throw data_error(name + ": bad magic number (first two bytes must be zero; not an IDX file)");
    if (bytes[2] != 0x08) {
        constexpr char hex[] = "0123456789abcdef";
        throw data_error(name + ": unsupported IDX element type 0x" + hex[bytes[2] >> 4] + hex[bytes[2] & 15] +
                         " (expected 0x08, unsigned byte)");
    }
    const std::size_t dims = bytes[3];
    if (dims != want_dims)
        throw data_error(name + ": IDX file has " + std::to_string(dims) + " dimensions, " + what + " need " +
                         std::to_string(want_dims));
    const std::size_t header = 4 + 4 * dims;
    if (bytes.size() < header)
        throw data_error(name + ": truncated IDX header (" + std::to_string(bytes.size()) + " bytes, the header of a " +
                         std::to_string(dims) + "-dimensional file has " + std::to_string(header) + ")");
    std::vector<std::size_t> d(dims);
    std::size_t elements = 1;
    for (std::size_t i = 0; i < dims; ++i) {
        d[i] = read_be32(bytes.data() + 4 + 4 * i);
        elements *= d[i];
    }
    if (d[0] == 0) throw data_error(name + ": IDX file holds 0 items");
    const std::size_t expected = header + elements;
    if (bytes.size() < expected)
        throw data_error(name + ": truncated IDX file (" + std::to_string(bytes.size()) + " bytes, the header promises " +
                         std::to_string(d[0]) + " items = " + std::to_string(expected) + " bytes)");
    if (bytes.size() > expected)
        throw data_error(name + ": wrong item count in the IDX header (file has " +
                         std::to_string(bytes.size() - expected) + " bytes after the " + std::to_string(d[0]) +
                         " items it declares)");
    return d;
}

}  // namespace detail

/// Reads an IDX image file (3 dimensions [count, rows, cols], unsigned bytes), plain or gzip.
/// Throws data_error naming the file when it is missing, unreadable, truncated (fewer bytes than the header
/// promises), has trailing bytes (wrong item count), a bad magic number, an element type other than unsigned byte,
/// a dimension count other than 3, or 0 items.
[[nodiscard]] inline idx_images read_idx_images(const std::filesystem::path& path) {
    const std::string name = path.string();
    std::vector<std::uint8_t> bytes = read_file_bytes(path);
    const auto d = detail::parse_idx_header(bytes, name, 3, "images");
    if (d[1] == 0 || d[2] == 0) throw data_error(name + ": IDX images have a zero-sized dimension");
    idx_images out;
    out.count = d[0];
    out.rows = d[1];
    out.cols = d[2];
    out.path = name;
    out.pixels.assign(bytes.begin() + 16, bytes.end());
    return out;
}

/// Reads an IDX label file (1 dimension [count], unsigned bytes), plain or gzip, into int32 labels [count].
/// Throws data_error naming the file for every problem read_idx_images reports (with 1 dimension instead of 3) and
/// for a label outside [0, classes) (naming the label and its item index).
[[nodiscard]] inline std::vector<std::int32_t> read_idx_labels(const std::filesystem::path& path,
                                                               std::size_t classes) {
    const std::string name = path.string();
    const std::vector<std::uint8_t> bytes = read_file_bytes(path);
    const auto d = detail::parse_idx_header(bytes, name, 1, "labels");
    std::vector<std::int32_t> labels(d[0]);
    for (std::size_t i = 0; i < d[0]; ++i) {
        const std::uint8_t l = bytes[8 + i];
        if (l >= classes)
            throw data_error(name + ": label " + std::to_string(l) + " of item " + std::to_string(i) +
                             " is outside [0, " + std::to_string(classes) + ")");
        labels[i] = l;
    }
    return labels;
}

/// Images with their labels: the pair of IDX files of one split (e.g. train-images / train-labels).
struct idx_split {
    idx_images images;
    std::vector<std::int32_t> labels;  ///< [images.count], each in [0, classes)
};

/// Reads an image file and its label file and checks that they hold the same number of items.
/// Throws data_error (see read_idx_images / read_idx_labels); for a count mismatch the message names both files.
[[nodiscard]] inline idx_split read_idx_split(const std::filesystem::path& images_path,
                                              const std::filesystem::path& labels_path, std::size_t classes) {
    idx_split s{read_idx_images(images_path), read_idx_labels(labels_path, classes)};
    if (s.labels.size() != s.images.count)
        throw data_error(labels_path.string() + ": wrong item count: " + std::to_string(s.labels.size()) +
                         " labels, but " + images_path.string() + " holds " + std::to_string(s.images.count) +
                         " images");
    return s;
}

}  // namespace pipeprop::data
