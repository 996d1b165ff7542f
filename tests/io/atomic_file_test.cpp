// Atomic whole-file writes: the target is replaced only once the new contents are
// complete, and a failed write leaves the old file and no temporary behind.
#include "weft/io/atomic_file.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "scratch_dir.hpp"

namespace fs = std::filesystem;

using weft_test::scratch_dir;

namespace {

std::string read_text(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_text(const fs::path& path, const std::string& text) {
    weft::io::write_file_atomically(path, std::as_bytes(std::span(text.data(), text.size())));
}

std::size_t entries_in(const fs::path& dir) {
    return std::size_t(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

}  // namespace

TEST_CASE("an atomic write creates and then replaces a file") {
    scratch_dir dir("atomic_replace");
    const fs::path target = dir.path / "model.bin";
    write_text(target, "first version");
    CHECK(read_text(target) == "first version");
    write_text(target, "second");
    CHECK(read_text(target) == "second");
    CHECK(entries_in(dir.path) == 1);  // no temporary left over
}

TEST_CASE("the temporary lives next to the target under a per-process, per-call name") {
    scratch_dir dir("atomic_names");
    const fs::path target = dir.path / "x.safetensors";
    weft::io::atomic_file a(target);
    weft::io::atomic_file b(target);
    CHECK(a.temporary_path().parent_path() == dir.path);
    const std::string prefix = "x.safetensors.tmp." + std::to_string(::getpid()) + ".";
    CHECK(a.temporary_path().filename().string().rfind(prefix, 0) == 0);
    CHECK(a.temporary_path() != b.temporary_path());
    CHECK(fs::exists(a.temporary_path()));
    CHECK_FALSE(fs::exists(target));  // nothing visible before commit
}

TEST_CASE("a write that fails half-way leaves the old file and no temporary") {
    scratch_dir dir("atomic_fail");
    const fs::path target = dir.path / "ckpt";
    write_text(target, "old contents");
    const std::string half = "new contents, half written";
    CHECK_THROWS_AS(weft::io::write_file_atomically(target,
                                                       [&](weft::io::atomic_file& file) {
                                                           file.write(std::as_bytes(std::span(half.data(), 10)));
                                                           throw std::runtime_error("simulated failure");
                                                       }),
                    std::runtime_error);
    CHECK(read_text(target) == "old contents");
    CHECK(entries_in(dir.path) == 1);
}

TEST_CASE("a write into a missing directory names the path and the system's reason") {
    scratch_dir dir("atomic_missing");
    const fs::path target = dir.path / "no" / "such" / "dir" / "file";
    CHECK_THROWS_WITH(write_text(target, "x"),
                      Catch::Contains(target.string()) && Catch::Contains("No such file or directory"));
    CHECK(entries_in(dir.path) == 0);
}

TEST_CASE("a rename that fails removes the temporary and keeps what was there") {
    scratch_dir dir("atomic_rename");
    const fs::path target = dir.path / "occupied";
    fs::create_directories(target / "inside");  // a file cannot be renamed over a directory
    CHECK_THROWS_WITH(write_text(target, "data"), Catch::Contains("cannot rename") && Catch::Contains(target.string()));
    CHECK(fs::is_directory(target / "inside"));
    CHECK(entries_in(dir.path) == 1);
}

TEST_CASE("an atomic file is unusable after commit") {
    scratch_dir dir("atomic_commit");
    weft::io::atomic_file file(dir.path / "f");
    file.commit();
    CHECK(read_text(dir.path / "f").empty());
    CHECK_THROWS_AS(file.write(std::as_bytes(std::span("x", 1))), weft::error);
    CHECK_THROWS_AS(file.commit(), weft::error);
}
