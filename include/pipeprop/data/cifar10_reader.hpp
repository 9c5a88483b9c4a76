// pipeprop/data/cifar10_reader.hpp: reader for the CIFAR-10 binary batches (data_batch_1.bin ... data_batch_5.bin,
// test_batch.bin of cifar-10-binary.tar.gz; Krizhevsky 2009, https://www.cs.toronto.edu/~kriz/cifar.html).
//
// Each file is a sequence of 3073-byte records: 1 label byte (0..9), then 3072 pixel bytes: the 32x32 red plane,
// then green, then blue, each row-major. So the pixels of a record are one [3, 32, 32] image.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "pipeprop/data/data_error.hpp"
#include "pipeprop/data/file_bytes.hpp"

namespace pipeprop::data {

/// Geometry of CIFAR-10.
struct cifar10_format {
    ///@{
    /// Image dimensions [3, 32, 32]: channels, rows, cols.
    static constexpr std::size_t channels = 3;
    static constexpr std::size_t rows = 32;
    static constexpr std::size_t cols = 32;
    ///@}
    static constexpr std::size_t image_bytes = channels * rows * cols;  ///< 3072
    static constexpr std::size_t record_bytes = 1 + image_bytes;        ///< 3073
    static constexpr std::size_t classes = 10;  ///< Classes; labels lie in [0, 10).
};

/// Images and labels of one or more CIFAR-10 batch files: pixels [count, 3, 32, 32] bytes, labels [count].
struct cifar10_images {
    std::size_t count = 0;  ///< Number of images.
    std::vector<std::uint8_t> pixels;  ///< Pixels [count, 3, 32, 32], bytes 0..255.
    std::vector<std::int32_t> labels;  ///< Labels [count], in [0, 10).
};

/// Appends the records of one CIFAR-10 binary batch file (plain or gzip) to `out`.
/// Throws data_error naming the file when it is missing, unreadable, empty, not a whole number of 3073-byte records
/// (truncated or corrupt), or holds a label outside [0, 10) (naming the record).
[[gnu::cold]] inline void append_cifar10_batch(const std::filesystem::path& path, cifar10_images& out) {
    using f = cifar10_format;
    const std::string name = path.string();
    const std::vector<std::uint8_t> bytes = read_file_bytes(path);
    if (bytes.empty()) throw data_error(name + ": empty CIFAR-10 batch file (0 records)");
    if (bytes.size() % f::record_bytes != 0)
        throw data_error(name + ": truncated or corrupt CIFAR-10 batch: " + std::to_string(bytes.size()) +
                         " bytes is not a whole number of " + std::to_string(f::record_bytes) + "-byte records (" +
                         std::to_string(bytes.size() % f::record_bytes) + " bytes left over)");
    const std::size_t n = bytes.size() / f::record_bytes;
    out.pixels.reserve(out.pixels.size() + n * f::image_bytes);
    out.labels.reserve(out.labels.size() + n);
    for (std::size_t i = 0; i < n; ++i) {
        const std::uint8_t* rec = bytes.data() + i * f::record_bytes;
        if (rec[0] >= f::classes)
            throw data_error(name + ": label " + std::to_string(rec[0]) + " of record " + std::to_string(i) +
                             " is outside [0, 10)");
        out.labels.push_back(rec[0]);
        out.pixels.insert(out.pixels.end(), rec + 1, rec + f::record_bytes);
    }
    out.count += n;
}

/// Reads one CIFAR-10 binary batch file. Throws as append_cifar10_batch.
[[nodiscard, gnu::cold]] inline cifar10_images read_cifar10_batch(const std::filesystem::path& path) {
    cifar10_images out;
    append_cifar10_batch(path, out);
    return out;
}

/// Reads several batch files, concatenated in the given order (e.g. data_batch_1.bin .. data_batch_5.bin).
/// Throws as append_cifar10_batch for the first file with a problem.
[[nodiscard, gnu::cold]] inline cifar10_images read_cifar10_batches(const std::vector<std::filesystem::path>& paths) {
    cifar10_images out;
    for (const auto& p : paths) append_cifar10_batch(p, out);
    return out;
}

}  // namespace pipeprop::data
