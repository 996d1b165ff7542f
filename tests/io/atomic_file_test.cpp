// Atomic whole-file writes: the target is replaced only once the new contents are
// complete, and a failed write leaves the old file and no temporary behind.
#include "weft/io/atomic_file.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "file_contents.hpp"
#include "scratch_dir.hpp"

namespace fs = std::filesystem;

using weft_test::read_text;
using weft_test::scratch_dir;

namespace {

void write_atomically(const fs::path& path, const std::string& text) {
    weft::io::write_file_atomically(path, std::as_bytes(std::span(text.data(), text.size())));
}

std::size_t entries_in(const fs::path& dir) {
    return std::size_t(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

}  // namespace

TEST_CASE("an atomic write creates and then replaces a file") {
    scratch_dir dir("atomic_replace");
    const fs::path target = dir.path / "model.bin";
    write_atomically(target, "first version");
    CHECK(read_text(target) == "first version");
    write_atomically(target, "second");
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
    write_atomically(target, "old contents");
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
    CHECK_THROWS_WITH(write_atomically(target, "x"),
                      Catch::Contains(target.string()) && Catch::Contains("No such file or directory"));
    CHECK(entries_in(dir.path) == 0);
}

TEST_CASE("a target that is not a regular file is refused and kept: directory, link, device") {
    scratch_dir dir("atomic_not_regular");
    const fs::path directory = dir.path / "occupied";
    fs::create_directories(directory / "inside");
    CHECK_THROWS_WITH(write_atomically(directory, "data"),
                      Catch::Contains(directory.string()) && Catch::Contains("is a directory"));
    CHECK(fs::is_directory(directory / "inside"));
    // A link is not followed and not replaced: the file it points at stays, and so does the link.
    const fs::path real = dir.path / "real";
    write_atomically(real, "old");
    const fs::path link = dir.path / "link";
    fs::create_symlink(real, link);
    CHECK_THROWS_WITH(write_atomically(link, "new"), Catch::Contains("is a symbolic link"));
    CHECK(fs::is_symlink(link));
    CHECK(read_text(real) == "old");
    // /dev/null is a device: as root a rename would replace the node with a regular file.
    CHECK_THROWS_WITH(write_atomically("/dev/null", "x"), Catch::Contains("is a device"));
    CHECK_THROWS_WITH(weft::io::require_writable("/dev/full", "--save"),
                      Catch::Contains("--save = \"/dev/full\" is invalid: is a device"));
    CHECK(fs::is_character_file("/dev/null"));
    CHECK(entries_in(dir.path) == 3);
}

TEST_CASE("a target is checked for writing before any work: missing and read-only directories") {
    scratch_dir dir("atomic_writable");
    CHECK_NOTHROW(weft::io::require_writable(dir.path / "model.safetensors", "--save"));
    CHECK(entries_in(dir.path) == 0);  // the probe leaves nothing behind
    CHECK_THROWS_WITH(weft::io::require_writable(dir.path / "no" / "model.safetensors", "--save"),
                      Catch::Contains("--save = ") && Catch::Contains("cannot be written") &&
                          Catch::Contains("No such file or directory"));
    const fs::path read_only = dir.path / "read_only";
    fs::create_directories(read_only);
    fs::permissions(read_only, fs::perms::owner_read | fs::perms::owner_exec);
    // Root writes into a read-only directory anyway; the probe says what really happens.
    const bool root = ::geteuid() == 0;
    if (!root)
        CHECK_THROWS_WITH(weft::io::require_writable(read_only / "model.safetensors", "--save"),
                          Catch::Contains("Permission denied"));
    fs::permissions(read_only, fs::perms::owner_all);
}

TEST_CASE("temporaries of killed writers are removed; a live writer's are not") {
    scratch_dir dir("atomic_stale");
    const fs::path target = dir.path / "model.safetensors";
    // pid 2^22 + 1 is above Linux's pid limit: no such process.
    const fs::path stale = dir.path / "model.safetensors.tmp.4194305.0";
    const fs::path live = dir.path / ("model.safetensors.tmp." + std::to_string(::getpid()) + ".7");
    const fs::path other = dir.path / "other.safetensors.tmp.4194305.0";
    for (const auto& p : {stale, live, other}) std::ofstream(p) << "partial";
    // Too young to be sure (it could be another machine's writer): kept.
    CHECK(weft::io::remove_stale_temporaries(target) == 0);
    CHECK(weft::io::remove_stale_temporaries(target, std::chrono::seconds(0)) == 1);
    CHECK_FALSE(fs::exists(stale));
    CHECK(fs::exists(live));
    CHECK(fs::exists(other));
}

TEST_CASE("a rename that fails removes the temporary and keeps what was there") {
    scratch_dir dir("atomic_rename");
    const fs::path target = dir.path / "gone";
    weft::io::atomic_file file(target);
    file.write(std::as_bytes(std::span("x", 1)));
    // The temporary disappears before the commit (another process removed it).
    fs::remove(file.temporary_path());
    CHECK_THROWS_WITH(file.commit(), Catch::Contains("cannot rename") && Catch::Contains(target.string()));
    CHECK(entries_in(dir.path) == 0);
}

TEST_CASE("an atomic file is unusable after commit") {
    scratch_dir dir("atomic_commit");
    weft::io::atomic_file file(dir.path / "f");
    file.commit();
    CHECK(read_text(dir.path / "f").empty());
    CHECK_THROWS_AS(file.write(std::as_bytes(std::span("x", 1))), weft::error);
    CHECK_THROWS_AS(file.commit(), weft::error);
}
