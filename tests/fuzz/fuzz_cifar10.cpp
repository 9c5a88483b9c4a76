// tests/fuzz/fuzz_cifar10.cpp: libFuzzer target for the CIFAR-10 batch reader
// (include/pipeprop/data/cifar10_reader.hpp), plain and gzip. Each input is one batch file; it must end in a
// data_error or in count records whose labels are in [0, 10) and whose pixels are count * 3072 bytes. The input is
// also appended twice to one result (read_cifar10_batches) to exercise the appending path.
#include <pipeprop/data/cifar10_reader.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "fuzz_input_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    namespace pd = pipeprop::data;
    using f = pd::cifar10_format;
    const auto path = fuzz::write_file("input-cifar10.bin", data, size);
    try {
        const pd::cifar10_images c = pd::read_cifar10_batches({path, path});
        if (c.count == 0 || c.count % 2 != 0 || c.labels.size() != c.count || c.pixels.size() != c.count * f::image_bytes)
            std::abort();
        for (const auto l : c.labels)
            if (l < 0 || l >= 10) std::abort();
    } catch (const pipeprop::data_error&) {
    }
    return 0;
}
