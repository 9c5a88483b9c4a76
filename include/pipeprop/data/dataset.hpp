// pipeprop/data/dataset.hpp: an in-memory image classification dataset (float images normalized per channel,
// int32 labels) and the loader that finds MNIST / Fashion-MNIST (IDX) or CIFAR-10 (binary batches) in a directory.
//
// Normalization: x = (pixel / 255 - mean_c) / std_c with the per-channel mean and (population) standard deviation
// of pixel / 255 over the TRAINING split; the same statistics are applied to the test split.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "pipeprop/data/cifar10_reader.hpp"
#include "pipeprop/data/data_error.hpp"
#include "pipeprop/data/idx_reader.hpp"

namespace pipeprop::data {

/// Default data directory: Debian's dataset-fashion-mnist package.
inline constexpr const char* default_data_directory = "/usr/share/datasets/fashion-mnist";

/// Per-sample image geometry [channels, rows, cols].
struct image_geometry {
    ///@{
    /// The dimensions [channels, rows, cols] of one image.
    std::size_t channels = 1;
    std::size_t rows = 1;
    std::size_t cols = 1;
    ///@}
    /// Values per image, channels * rows * cols.
    [[nodiscard]] constexpr std::size_t size() const noexcept { return channels * rows * cols; }
    friend constexpr bool operator==(const image_geometry&, const image_geometry&) = default;
    /// "CxHxW", e.g. "1x28x28" (messages).
    [[nodiscard]] std::string to_string() const {
        return std::to_string(channels) + "x" + std::to_string(rows) + "x" + std::to_string(cols);
    }
};

/// Per-channel statistics of pixel / 255 (dimensionless): mean [C] and population standard deviation [C].
struct channel_statistics {
    std::vector<double> mean;  ///< Mean of pixel / 255 per channel [C].
    std::vector<double> stddev;  ///< Population standard deviation of pixel / 255 per channel [C].
};

/// An in-memory dataset: images [count, C, H, W] float (normalized), labels [count] int32 in [0, classes).
struct dataset {
    image_geometry geometry;  ///< Geometry of every image.
    std::size_t count = 0;  ///< Number of samples.
    std::size_t classes = 0;  ///< Number of classes; labels lie in [0, classes).
    std::vector<float> images;  ///< Images [count, C, H, W], normalized floats.
    std::vector<std::int32_t> labels;  ///< Labels [count].

    /// First value of image i ([C, H, W], geometry.size() floats). Requires i < count.
    [[nodiscard]] const float* image(std::size_t i) const noexcept { return images.data() + i * geometry.size(); }
};

namespace detail {
/// True when count images of geometry g hold exactly `pixels` values: count * C * H * W computed with overflow checks
/// (a product that overflows never matches, however it wraps).
inline bool holds_images(std::size_t pixels, std::size_t count, image_geometry g) noexcept {
    std::size_t n = 0;
    return !__builtin_mul_overflow(g.channels, g.rows, &n) && !__builtin_mul_overflow(n, g.cols, &n) &&
           !__builtin_mul_overflow(n, count, &n) && n == pixels;
}
}  // namespace detail

/// Per-channel statistics of byte images pixels [count, C, H, W]. A channel with zero spread gets stddev 1 (so the
/// normalization never divides by zero). Throws std::invalid_argument when pixels.size() != count * g.size() (the
/// product overflow-checked) or count == 0.
[[nodiscard, gnu::cold]] inline channel_statistics compute_channel_statistics(std::span<const std::uint8_t> pixels,
                                                                              std::size_t count, image_geometry g) {
    if (count == 0 || !detail::holds_images(pixels.size(), count, g))
        throw std::invalid_argument("pipeprop::data::compute_channel_statistics: " + std::to_string(pixels.size()) +
                                    " pixels do not hold " + std::to_string(count) + " images of " + g.to_string());
    const std::size_t plane = g.rows * g.cols;
    channel_statistics s;
    s.mean.assign(g.channels, 0.0);
    s.stddev.assign(g.channels, 0.0);
    // Exact integer sums (no floating-point summation order issues): sum p and sum p^2 per channel.
    for (std::size_t c = 0; c < g.channels; ++c) {
        std::uint64_t sum = 0, sum_sq = 0;
        for (std::size_t n = 0; n < count; ++n) {
            const std::uint8_t* p = pixels.data() + n * g.size() + c * plane;
            for (std::size_t i = 0; i < plane; ++i) {
                sum += p[i];
                sum_sq += std::uint64_t(p[i]) * p[i];
            }
        }
        const double m = static_cast<double>(count * plane);
        const double mean = static_cast<double>(sum) / m;
        const double var = std::max(0.0, static_cast<double>(sum_sq) / m - mean * mean);
        s.mean[c] = mean / 255.0;
        s.stddev[c] = var > 0.0 ? std::sqrt(var) / 255.0 : 1.0;
    }
    return s;
}

/// Builds a dataset from byte images pixels [count, C, H, W] and labels [count] in [0, classes), normalized with
/// `stats`. Throws std::invalid_argument for inconsistent sizes (overflow-checked), statistics of the wrong channel
/// count, or a label outside [0, classes) (naming the sample and the label).
[[nodiscard, gnu::cold]] inline dataset make_dataset(std::span<const std::uint8_t> pixels,
                                                     std::vector<std::int32_t> labels, image_geometry g,
                                                     std::size_t classes, const channel_statistics& stats) {
    const std::size_t count = labels.size();
    if (!detail::holds_images(pixels.size(), count, g) || stats.mean.size() != g.channels || stats.stddev.size() != g.channels)
        throw std::invalid_argument("pipeprop::data::make_dataset: sizes do not match (" +
                                    std::to_string(pixels.size()) + " pixels, " + std::to_string(count) +
                                    " labels, images " + g.to_string() + ", statistics for " +
                                    std::to_string(stats.mean.size()) + " channels)");
    const auto bad = std::find_if(labels.begin(), labels.end(), [classes](std::int32_t y) {
        return y < 0 || static_cast<std::size_t>(y) >= classes;
    });
    if (bad != labels.end())
        throw std::invalid_argument("pipeprop::data::make_dataset: label " + std::to_string(*bad) + " of sample " +
                                    std::to_string(bad - labels.begin()) + " is outside [0, " +
                                    std::to_string(classes) + ")");
    dataset d;
    d.geometry = g;
    d.count = count;
    d.classes = classes;
    d.labels = std::move(labels);
    d.images.resize(pixels.size());
    const std::size_t plane = g.rows * g.cols;
    // Per channel, a 256-entry table: every pixel value maps to the same float whichever image it is in.
    for (std::size_t c = 0; c < g.channels; ++c) {
        std::array<float, 256> table{};
        for (int v = 0; v < 256; ++v)
            table[static_cast<std::size_t>(v)] = static_cast<float>((v / 255.0 - stats.mean[c]) / stats.stddev[c]);
        for (std::size_t n = 0; n < count; ++n) {
            const std::size_t off = n * g.size() + c * plane;
            for (std::size_t i = 0; i < plane; ++i) d.images[off + i] = table[pixels[off + i]];
        }
    }
    return d;
}

/// Training and test split of one dataset, normalized with the training split's statistics.
struct dataset_pair {
    std::string format;              ///< "idx" (MNIST family) or "cifar10"
    std::string train_source;        ///< file(s) the training split came from (for messages)
    std::string test_source;  ///< file(s) the test split came from (for messages)
    channel_statistics statistics;   ///< of the training split
    dataset train;  ///< The training split.
    dataset test;  ///< The test split, normalized with the training split's statistics.
};

namespace detail {

inline bool is_file(const std::filesystem::path& p) {
    std::error_code ec;
    return std::filesystem::is_regular_file(p, ec);
}

/// Throws data_error when a data file's name p (followed through links) exists but is not a regular file: "<p>: is
/// a directory, not <what>", or "<p>: exists but is not a regular file (a FIFO / a character device / ...), not
/// <what>". Reads the file's type only (stat): a FIFO is never opened, so this cannot block. A name that does not
/// exist (also a dangling link or a link loop) is left to the caller.
[[gnu::cold]] inline void refuse_not_regular(const std::filesystem::path& p, const std::string& what) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_type type = fs::status(p, ec).type();
    if (ec || type == fs::file_type::not_found || type == fs::file_type::none || type == fs::file_type::regular)
        return;
    if (type == fs::file_type::directory) throw data_error(p.string() + ": is a directory, not " + what);
    const char* kind = type == fs::file_type::fifo        ? "a FIFO"
                       : type == fs::file_type::character ? "a character device"
                       : type == fs::file_type::block     ? "a block device"
                       : type == fs::file_type::socket    ? "a socket"
                                                          : "of another kind";
    throw data_error(p.string() + ": exists but is not a regular file (" + kind + "), not " + what);
}

/// First existing file among the usual names of an MNIST-family file (gz or not, '-' or '.' before idx). Throws
/// data_error (refuse_not_regular) when one of those names is a directory, a FIFO, a device or a socket: it names that
/// file instead of reporting the file missing.
[[gnu::cold]] inline std::filesystem::path find_idx_file(const std::filesystem::path& dir, const std::string& stem,
                                                         const std::string& kind) {
    for (const std::string sep : {"-", "."})
        for (const std::string ext : {".gz", ""}) {
            const auto p = dir / (stem + sep + kind + ext);
            if (is_file(p)) return p;
            refuse_not_regular(p, "an IDX file");
        }
    return {};
}

[[gnu::cold]] inline void check_geometry(const std::string& source, image_geometry got, image_geometry want) {
    if (got != want)
        throw data_error(source + ": image size " + got.to_string() + " (channels x rows x cols) does not match the "
                         "network input " + want.to_string());
}

}  // namespace detail

/// Loads the dataset found in `dir` and checks its image size against the network input `expected` [C, H, W]:
///  - MNIST / Fashion-MNIST: train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
///    t10k-labels-idx1-ubyte, each optionally with ".gz", and with "." instead of "-" before "idx" also accepted;
///  - CIFAR-10: data_batch_1.bin .. data_batch_5.bin and test_batch.bin in dir or dir/cifar-10-batches-bin.
/// Labels must lie in [0, 10). Setup-time function (allocates, reads files).
/// Throws data_error naming the directory when it does not exist or holds neither format (or only part of one),
/// and naming the file for every reader error, for a directory, FIFO, device or socket where a data file should be
/// (never opened) and for an image size that differs from `expected`.
[[nodiscard, gnu::cold]] inline dataset_pair load_image_dataset(const std::filesystem::path& dir,
                                                                image_geometry expected) {
    constexpr std::size_t classes = 10;
    std::error_code ec;
    if (!std::filesystem::is_directory(dir, ec))
        throw data_error(dir.string() + ": data directory not found (give the dataset directory with --data)");
    dataset_pair out;
    const auto train_images = detail::find_idx_file(dir, "train-images", "idx3-ubyte");
    if (!train_images.empty()) {
        const auto need = [&](const std::string& stem, const std::string& kind) {
            const auto p = detail::find_idx_file(dir, stem, kind);
            if (p.empty())
                throw data_error((dir / (stem + "-" + kind + ".gz")).string() +
                                 ": file not found (neither gzip nor plain; the IDX dataset in " + dir.string() +
                                 " is incomplete)");
            return p;
        };
        const auto train_labels = need("train-labels", "idx1-ubyte");
        const auto test_images = need("t10k-images", "idx3-ubyte");
        const auto test_labels = need("t10k-labels", "idx1-ubyte");
        idx_split train = read_idx_split(train_images, train_labels, classes);
        const image_geometry g{1, train.images.rows, train.images.cols};
        detail::check_geometry(train_images.string(), g, expected);
        idx_split test = read_idx_split(test_images, test_labels, classes);
        detail::check_geometry(test_images.string(), image_geometry{1, test.images.rows, test.images.cols}, expected);
        out.format = "idx";
        out.train_source = train_images.string();
        out.test_source = test_images.string();
        out.statistics = compute_channel_statistics(train.images.pixels, train.images.count, g);
        out.train = make_dataset(train.images.pixels, std::move(train.labels), g, classes, out.statistics);
        out.test = make_dataset(test.images.pixels, std::move(test.labels), g, classes, out.statistics);
        return out;
    }
    for (const auto& base : {dir, dir / "cifar-10-batches-bin"}) {
        detail::refuse_not_regular(base / "data_batch_1.bin", "a CIFAR-10 batch file");
        if (!detail::is_file(base / "data_batch_1.bin")) continue;
        std::vector<std::filesystem::path> train_files;
        for (int i = 1; i <= 5; ++i) {
            const auto p = base / ("data_batch_" + std::to_string(i) + ".bin");
            detail::refuse_not_regular(p, "a CIFAR-10 batch file");
            if (!detail::is_file(p))
                throw data_error(p.string() + ": file not found (the CIFAR-10 dataset in " + base.string() +
                                 " is incomplete)");
            train_files.push_back(p);
        }
        const auto test_file = base / "test_batch.bin";
        detail::refuse_not_regular(test_file, "a CIFAR-10 batch file");
        const image_geometry g{cifar10_format::channels, cifar10_format::rows, cifar10_format::cols};
        detail::check_geometry(train_files.front().string(), g, expected);
        cifar10_images train = read_cifar10_batches(train_files);
        cifar10_images test = read_cifar10_batch(test_file);
        out.format = "cifar10";
        out.train_source = base.string() + "/data_batch_{1..5}.bin";
        out.test_source = test_file.string();
        out.statistics = compute_channel_statistics(train.pixels, train.count, g);
        out.train = make_dataset(train.pixels, std::move(train.labels), g, classes, out.statistics);
        out.test = make_dataset(test.pixels, std::move(test.labels), g, classes, out.statistics);
        return out;
    }
    throw data_error(dir.string() + ": no dataset found (expected MNIST/Fashion-MNIST IDX files such as "
                     "train-images-idx3-ubyte.gz, or CIFAR-10 batches data_batch_1.bin ... test_batch.bin)");
}

/// Copies samples order[first, first + b) of `ds` into x [b, C, H, W] and labels [b]. No allocation.
/// Requires first + b <= order.size() (checked without overflow: a first + b that wraps past 2^64 is rejected too)
/// and every order entry < ds.count; throws std::out_of_range otherwise.
inline void gather_batch(const dataset& ds, std::span<const std::uint32_t> order, std::size_t first, std::size_t b,
                         float* x, std::int32_t* labels) {
    if (first > order.size() || b > order.size() - first)
        throw std::out_of_range("pipeprop::data::gather_batch: " + std::to_string(b) + " samples from position " +
                                std::to_string(first) + " exceed the order of " + std::to_string(order.size()));
    const std::size_t n = ds.geometry.size();
    for (std::size_t i = 0; i < b; ++i) {
        const std::size_t s = order[first + i];
        if (s >= ds.count)
            throw std::out_of_range("pipeprop::data::gather_batch: sample index " + std::to_string(s) +
                                    " exceeds the dataset of " + std::to_string(ds.count));
        std::copy_n(ds.image(s), n, x + i * n);
        labels[i] = ds.labels[s];
    }
}

}  // namespace pipeprop::data
