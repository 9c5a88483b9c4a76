// tests/fuzz/fuzz_input_file.hpp: the libFuzzer targets' scratch files. The readers under test take paths, so each
// input is written to a file in a per-process directory (under /dev/shm when it exists: no disk traffic) that is
// removed at exit.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace fuzz {

/// The process's scratch directory (created on first use, removed at exit). The path object is never destroyed:
/// the exit handler that removes the directory runs after the function-local statics' destructors registered
/// later, so a static path would be read after it was freed (ASan: heap-use-after-free at exit).
inline const std::filesystem::path& scratch_directory() {
    static const std::filesystem::path* const dir = [] {
        std::error_code ec;
        const std::filesystem::path base = std::filesystem::is_directory("/dev/shm", ec)
                                               ? std::filesystem::path("/dev/shm")
                                               : std::filesystem::temp_directory_path();
        std::string templ = (base / "pipeprop-fuzz-XXXXXX").string();
        if (::mkdtemp(templ.data()) == nullptr) std::abort();
        std::atexit([] {
            std::error_code e;
            std::filesystem::remove_all(scratch_directory(), e);
        });
        return new std::filesystem::path(templ);
    }();
    return *dir;
}

/// Writes `size` bytes to scratch_directory() / name (replacing it) and returns the path.
inline std::filesystem::path write_file(const std::string& name, const std::uint8_t* data, std::size_t size) {
    const std::filesystem::path p = scratch_directory() / name;
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    out.close();
    if (!out) std::abort();  // the harness itself failed: not a finding
    return p;
}

}  // namespace fuzz
