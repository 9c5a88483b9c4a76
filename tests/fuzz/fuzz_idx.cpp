// tests/fuzz/fuzz_idx.cpp: libFuzzer target for the IDX reader (include/pipeprop/data/idx_reader.hpp), plain and
// gzip. Each input is one file, read as an image file (3 dimensions) and as a label file (1 dimension, 10 classes).
// Every input must end in a data_error or in images whose sizes agree with the bytes read; accepted images then go
// through compute_channel_statistics and make_dataset, as load_image_dataset does with a training split.
#include <pipeprop/data/dataset.hpp>
#include <pipeprop/data/idx_reader.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "fuzz_input_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    namespace pd = pipeprop::data;
    const auto path = fuzz::write_file("input-idx", data, size);
    try {
        const pd::idx_images im = pd::read_idx_images(path);
        // A valid result is self-consistent: the pixels are exactly count images of rows x cols bytes.
        // (A product that overflows std::size_t is an accepted header the file cannot hold: a finding.)
        std::size_t n = 0;
        if (im.count == 0 || im.rows == 0 || im.cols == 0 || __builtin_mul_overflow(im.count, im.rows, &n) ||
            __builtin_mul_overflow(n, im.cols, &n) || n != im.pixels.size())
            std::abort();
        const pd::image_geometry g{1, im.rows, im.cols};
        const auto stats = pd::compute_channel_statistics(im.pixels, im.count, g);
        if (stats.mean.size() != 1) std::abort();
    } catch (const pipeprop::data_error&) {
    } catch (const std::invalid_argument&) {  // compute_channel_statistics's documented size check
    }
    try {
        const auto labels = pd::read_idx_labels(path, 10);
        for (const auto l : labels)
            if (l < 0 || l >= 10) std::abort();
    } catch (const pipeprop::data_error&) {
    }
    return 0;
}
