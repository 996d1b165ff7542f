// A fresh directory per test under the system temp directory, removed at the end;
// the process id keeps parallel ctest runs apart.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace weft_test {

struct scratch_dir {
    std::filesystem::path path;
    explicit scratch_dir(const std::string& name)
        : path(std::filesystem::temp_directory_path() / ("weft_io_" + name + "_" + std::to_string(::getpid()))) {
        std::filesystem::remove_all(path);
        std::filesystem::create_directories(path);
    }
    ~scratch_dir() {
        std::error_code ignored;
        std::filesystem::remove_all(path, ignored);
    }
};

}  // namespace weft_test
