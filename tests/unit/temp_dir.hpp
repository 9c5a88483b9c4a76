// tests/unit/temp_dir.hpp: a scratch directory for one test, <system temp>/<name>-<pid>, empty when made and removed
// (with its contents) when the object goes out of scope.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace test_support {

struct temp_dir {
    std::filesystem::path path;
    explicit temp_dir(const std::string& name)
        : path(std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()))) {
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
    }
    ~temp_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
};

}  // namespace test_support
