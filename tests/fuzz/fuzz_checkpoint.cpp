// tests/fuzz/fuzz_checkpoint.cpp: libFuzzer target for the checkpoint loader (include/pipeprop/checkpoint.hpp:
// manifest parser and .npy tensor files, read with xtensor's npy reader).
//
// Input layout: segments separated by the 8-byte line "\n--npy--\n"; the first segment is manifest.txt, the
// following ones are a.npy, b.npy, c.npy, d.npy (the seeds' manifests name tensors a..d; a mutated manifest may
// name others, which are then missing files). Every input must end in a checkpoint_error or in a checkpoint whose
// tensors hold exactly the values their shapes say; each loaded tensor is then read back with read_tensor (which
// also rejects NaN / infinity with checkpoint_error).
#include <pipeprop/checkpoint.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "fuzz_input_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    namespace fs = std::filesystem;
    static const fs::path dir = [] {
        const fs::path d = fuzz::scratch_directory() / "checkpoint";
        fs::create_directories(d);
        return d;
    }();
    static const char* const files[] = {"manifest.txt", "a.npy", "b.npy", "c.npy", "d.npy"};
    for (const char* f : files) {
        std::error_code ec;
        fs::remove(dir / f, ec);
    }
    constexpr std::string_view sep = "\n--npy--\n";
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    std::vector<std::string_view> segments;
    for (std::size_t pos = 0; segments.size() < std::size(files) && pos <= in.size();) {
        std::size_t end = in.find(sep, pos);
        if (end == std::string_view::npos || segments.size() + 1 == std::size(files)) end = in.size();
        segments.push_back(in.substr(pos, end - pos));
        pos = end + sep.size();
    }
    for (std::size_t k = 0; k < segments.size(); ++k)
        fuzz::write_file(fs::path("checkpoint") / files[k], reinterpret_cast<const std::uint8_t*>(segments[k].data()),
                         segments[k].size());
    try {
        const pipeprop::checkpoint c = pipeprop::load_checkpoint(dir);
        for (const auto& t : c.tensors()) {
            std::size_t n = 1;
            for (const auto d : t.shape)
                if (__builtin_mul_overflow(n, d, &n)) std::abort();  // accepted a shape no file can hold
            std::visit(
                [&](const auto& v) {
                    using T = typename std::decay_t<decltype(v)>::value_type;
                    if (v.size() != n) std::abort();
                    std::vector<T> out(n);
                    try {
                        c.read_tensor<T>(t.name, t.shape, std::span<T>(out));
                    } catch (const pipeprop::checkpoint_error&) {
                    }
                },
                t.values);
        }
    } catch (const pipeprop::checkpoint_error&) {
    }
    return 0;
}
