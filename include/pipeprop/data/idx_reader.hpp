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
#include <utility>
#include <vector>

#include "pipeprop/data/data_error.hpp"
#include "pipeprop/data/file_bytes.hpp"

namespace pipeprop::data {

/// Images of one IDX file: `pixels` holds count * rows * cols bytes, image-major, row-major inside an image
/// ([count, 1, rows, cols] as a one-channel tensor). `path` is the file they came from (for later messages).
struct idx_images {
    std::size_t count = 0;  ///< Number of images.
    ///@{
    /// Image height (rows) and width (cols).
    std::size_t rows = 0;
    std::size_t cols = 0;
    ///@}
    std::vector<std::uint8_t> pixels;  ///< Pixels [count, rows, cols], bytes 0..255.
    std::string path;  ///< The file the images came from.
};

namespace detail {

inline std::uint32_t read_be32(const std::uint8_t* p) noexcept {
    return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) | std::uint32_t(p[3]);
}

/// Dimensions and elements of one IDX file.
struct idx_content {
    std::vector<std::size_t> dims;
    std::vector<std::uint8_t> elements;  ///< product of dims bytes, row-major
};

/// The byte v as two lower-case hex digits (the caller writes the "0x").
inline std::string hex_byte(std::uint8_t v) {
    const char* digits = "0123456789abcdef";
    return {digits[v >> 4], digits[v & 15]};
}

/// The sizes as "a, b, c".
inline std::string joined(const std::vector<std::size_t>& v) {
    std::string out;
    for (std::size_t i = 0; i < v.size(); ++i) out += (i > 0 ? ", " : "") + std::to_string(v[i]);
    return out;
}

/// Reads the IDX file `path` (plain or gzip) for `want_dims` dimensions of unsigned bytes: the header first, then
/// exactly the bytes it implies. The element count is overflow-checked and checked against what the file can hold
/// (its size when plain; deflate's maximal ratio when gzip) before anything is allocated for the elements, and the
/// elements are read in steps of at most 1 MiB, so neither a lying header nor a gzip bomb makes it allocate more than
/// the header implies (plus one step). Throws data_error naming the file (see read_idx_images).
[[gnu::cold]] inline idx_content read_idx_file(const std::filesystem::path& path, std::size_t want_dims,
                                               const char* what) {
    file_byte_stream in(path);
    const std::string& name = in.name();
    std::uint8_t magic[4] = {0, 0, 0, 0};
    const std::size_t got_magic = in.read(magic, 4);
    if (got_magic < 4) {
        if (in.is_gzip()) in.close();  // reports a truncated gzip stream as such
        throw data_error(name + ": truncated IDX file (" + std::to_string(got_magic) +
                         " bytes, shorter than the 4-byte magic number)");
    }
    if (magic[0] != 0 || magic[1] != 0)
        throw data_error(name + ": bad magic number (first two bytes must be zero; not an IDX file)");
    if (magic[2] != 0x08)
        throw data_error(name + ": unsupported IDX element type 0x" + hex_byte(magic[2]) +
                         " (expected 0x08, unsigned byte)");
    const std::size_t dims = magic[3];
    if (dims != want_dims)
        throw data_error(name + ": IDX file has " + std::to_string(dims) + " dimensions, " + what + " need " +
                         std::to_string(want_dims));
    const std::size_t header = 4 + 4 * dims;
    std::uint8_t sizes[4 * 255];
    const std::size_t got_sizes = in.read(sizes, 4 * dims);
    if (got_sizes < 4 * dims) {
        if (in.is_gzip()) in.close();
        throw data_error(name + ": truncated IDX header (" + std::to_string(4 + got_sizes) +
                         " bytes, the header of a " + std::to_string(dims) + "-dimensional file has " +
                         std::to_string(header) + ")");
    }
    idx_content out;
    out.dims.resize(dims);
    std::size_t elements = 1;
    bool overflow = false;
    for (std::size_t i = 0; i < dims; ++i) {
        out.dims[i] = read_be32(sizes + 4 * i);
        overflow = overflow || __builtin_mul_overflow(elements, out.dims[i], &elements);
    }
    if (overflow)
        throw data_error(name + ": corrupt IDX header: the sizes [" + joined(out.dims) +
                         "] declare more than 2^64 bytes");
    if (out.dims[0] == 0) throw data_error(name + ": IDX file holds 0 items");
    const std::uintmax_t limit = in.max_content_bytes();
    const auto promised = [&] {
        return "the header promises " + std::to_string(out.dims[0]) + " items [" + joined(out.dims) + "] = " +
               std::to_string(header + static_cast<std::uintmax_t>(elements)) + " bytes";
    };
    if (elements > limit || header > limit - elements)
        throw data_error(name + ": truncated IDX file (" + promised() + " a " + (in.is_gzip() ? "gzip" : "plain") +
                         " file of " + std::to_string(in.file_size()) + " bytes cannot hold)");
    if (!in.append_exactly(out.elements, elements)) {
        if (in.is_gzip()) in.close();
        throw data_error(name + ": truncated IDX file (" + std::to_string(header + out.elements.size()) + " bytes, " +
                         promised() + ")");
    }
    if (!in.at_end()) {
        const std::uintmax_t extra = in.is_gzip() ? 0 : in.file_size() - header - elements;
        throw data_error(extra > 0 ? name + ": wrong item count in the IDX header (file has " +
                                         std::to_string(extra) + " bytes after the " + std::to_string(out.dims[0]) +
                                         " items it declares)"
                                   : name + ": wrong item count in the IDX header (the gzip data go on after the " +
                                         std::to_string(out.dims[0]) + " items = " +
                                         std::to_string(header + elements) +
                                         " bytes it declares; not read further)");
    }
    in.close();
    return out;
}

}  // namespace detail

/// Reads an IDX image file (3 dimensions [count, rows, cols], unsigned bytes), plain or gzip.
/// Throws data_error naming the file when it is missing, unreadable, truncated (fewer bytes than the header
/// promises), has trailing bytes (wrong item count), a bad magic number, an element type other than unsigned byte,
/// a dimension count other than 3, 0 items, or sizes whose product overflows 64 bits. Allocates at most what the
/// header implies (checked against the file first; gzip data beyond it are never decompressed).
[[nodiscard, gnu::cold]] inline idx_images read_idx_images(const std::filesystem::path& path) {
    const std::string name = path.string();
    detail::idx_content c = detail::read_idx_file(path, 3, "images");
    const auto& d = c.dims;
    if (d[1] == 0 || d[2] == 0) throw data_error(name + ": IDX images have a zero-sized dimension");
    idx_images out;
    out.count = d[0];
    out.rows = d[1];
    out.cols = d[2];
    out.path = name;
    out.pixels = std::move(c.elements);
    return out;
}

/// Reads an IDX label file (1 dimension [count], unsigned bytes), plain or gzip, into int32 labels [count].
/// Throws data_error naming the file for every problem read_idx_images reports (with 1 dimension instead of 3) and
/// for a label outside [0, classes) (naming the label and its item index).
[[nodiscard, gnu::cold]] inline std::vector<std::int32_t> read_idx_labels(const std::filesystem::path& path,
                                                                          std::size_t classes) {
    const std::string name = path.string();
    const detail::idx_content c = detail::read_idx_file(path, 1, "labels");
    std::vector<std::int32_t> labels(c.dims[0]);
    for (std::size_t i = 0; i < c.dims[0]; ++i) {
        const std::uint8_t l = c.elements[i];
        if (l >= classes)
            throw data_error(name + ": label " + std::to_string(l) + " of item " + std::to_string(i) +
                             " is outside [0, " + std::to_string(classes) + ")");
        labels[i] = l;
    }
    return labels;
}

/// Images with their labels: the pair of IDX files of one split (e.g. train-images / train-labels).
struct idx_split {
    idx_images images;  ///< The split's images.
    std::vector<std::int32_t> labels;  ///< [images.count], each in [0, classes)
};

/// Reads an image file and its label file and checks that they hold the same number of items.
/// Throws data_error (see read_idx_images / read_idx_labels); for a count mismatch the message names both files.
[[nodiscard, gnu::cold]] inline idx_split read_idx_split(const std::filesystem::path& images_path,
                                                         const std::filesystem::path& labels_path,
                                                         std::size_t classes) {
    idx_split s{read_idx_images(images_path), read_idx_labels(labels_path, classes)};
    if (s.labels.size() != s.images.count)
        throw data_error(labels_path.string() + ": wrong item count: " + std::to_string(s.labels.size()) +
                         " labels, but " + images_path.string() + " holds " + std::to_string(s.images.count) +
                         " images");
    return s;
}

}  // namespace pipeprop::data
