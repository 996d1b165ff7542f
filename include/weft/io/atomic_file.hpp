// Writing a whole file atomically: readers see the old file or the complete new
// one, never a half-written checkpoint, even if the writer is killed mid-way.
// Data goes to "<path>.tmp.<pid>.<n>" in the same directory, is fsynced, then renamed over <path>.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <exception>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "weft/core/error.hpp"

namespace weft::io {

namespace detail {

[[nodiscard]] inline std::string errno_text(int code) { return std::generic_category().message(code); }

[[noreturn]] inline void throw_file_error(const std::filesystem::path& path, std::string_view what, int code) {
    std::string expected(what);
    expected.append(": ").append(errno_text(code));
    throw invalid_argument("file", path.string(), expected);
}

// Distinct per process and per call, so two writers of one target (threads, or ranks
// sharing a file system) never share a temporary.
[[nodiscard]] inline std::filesystem::path temporary_path_for(const std::filesystem::path& path) {
    static std::atomic<unsigned long long> counter{0};
    std::string name = path.filename().string();
    name.append(".tmp.").append(std::to_string(::getpid())).append(".").append(std::to_string(counter++));
    return path.parent_path() / name;
}

// What kind of thing is at `path` now, in words, when it is neither missing nor a regular
// file: a rename over it would replace a device node, a link or a directory.
[[nodiscard]] inline std::string non_regular_kind(const std::filesystem::path& path) {
    std::error_code ignored;
    const auto status = std::filesystem::symlink_status(path, ignored);
    switch (status.type()) {
        case std::filesystem::file_type::not_found:
        case std::filesystem::file_type::none:
        case std::filesystem::file_type::regular: return {};
        case std::filesystem::file_type::symlink: return "a symbolic link";
        case std::filesystem::file_type::directory: return "a directory";
        case std::filesystem::file_type::character:
        case std::filesystem::file_type::block: return "a device";
        case std::filesystem::file_type::fifo: return "a pipe";
        case std::filesystem::file_type::socket: return "a socket";
        default: return "not a regular file";
    }
}

// Refuses a target that is there and is not a regular file, naming `parameter`.
inline void require_replaceable(const std::filesystem::path& path, std::string_view parameter) {
    if (const std::string kind = non_regular_kind(path); !kind.empty())
        throw invalid_argument(parameter, path.string(),
                               "is " + kind + "; weft replaces only regular files (or creates new ones): name a "
                               "file path, or remove what is there");
}

}  // namespace detail

// A file being written under a temporary name. commit() makes it visible as the
// target; destroying it uncommitted (an exception on the way) removes the temporary.
class atomic_file {
public:
    explicit atomic_file(std::filesystem::path path)
        : path_(std::move(path)), temporary_(detail::temporary_path_for(path_)) {
        require(!path_.empty() && path_.has_filename(), "file", path_.string(), "must name a file");
        detail::require_replaceable(path_, "file");
        fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd_ < 0) detail::throw_file_error(path_, "cannot create a temporary file next to it", errno);
    }
    atomic_file(const atomic_file&) = delete;
    atomic_file& operator=(const atomic_file&) = delete;
    ~atomic_file() { discard(); }

    [[nodiscard]] const std::filesystem::path& path() const { return path_; }
    [[nodiscard]] const std::filesystem::path& temporary_path() const { return temporary_; }

    void write(std::span<const std::byte> bytes) {
        require(fd_ >= 0, "file", path_.string(), "is already committed or discarded");
        const std::byte* data = bytes.data();
        std::size_t left = bytes.size();
        while (left > 0) {
            const ::ssize_t written = ::write(fd_, data, left);
            if (written < 0) {
                if (errno == EINTR) continue;
                fail("cannot write", errno);
            }
            data += written;
            left -= std::size_t(written);
        }
    }

    // fsync before rename: otherwise a crash can leave the new name pointing at empty data.
    void commit() {
        require(fd_ >= 0, "file", path_.string(), "is already committed or discarded");
        if (::fsync(fd_) != 0) fail("cannot flush to disk", errno);
        const int fd = std::exchange(fd_, -1);
        if (::close(fd) != 0) fail("cannot close", errno);
        if (::rename(temporary_.c_str(), path_.c_str()) != 0) fail("cannot rename the temporary file over it", errno);
        committed_ = true;
        // The rename itself is durable only once the directory is synced; best effort,
        // since some file systems refuse to open or sync a directory.
        const std::filesystem::path directory = path_.has_parent_path() ? path_.parent_path() : ".";
        const int dir_fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dir_fd >= 0) {
            (void)::fsync(dir_fd);
            ::close(dir_fd);
        }
    }

private:
    [[noreturn]] void fail(std::string_view what, int code) {
        discard();
        detail::throw_file_error(path_, what, code);
    }

    void discard() noexcept {
        if (fd_ >= 0) ::close(std::exchange(fd_, -1));
        if (!committed_) {
            std::error_code ignored;
            std::filesystem::remove(temporary_, ignored);
            committed_ = true;  // nothing left to clean up
        }
    }

    std::filesystem::path path_;
    std::filesystem::path temporary_;
    int fd_ = -1;
    bool committed_ = false;
};

// Checks, before any work is done, that an atomic write of `path` can happen: whatever is
// there is a regular file (or nothing), and its directory exists and takes a new file (a
// temporary is created and removed). A run checks its --save target before it trains, so
// that a missing or read-only directory does not lose the trained model at the end.
inline void require_writable(const std::filesystem::path& path, std::string_view parameter) {
    require(!path.empty() && path.has_filename(), parameter, path.string(), "must name a file");
    detail::require_replaceable(path, parameter);
    const std::filesystem::path temporary = detail::temporary_path_for(path);
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) {
        const int code = errno;
        throw invalid_argument(parameter, path.string(),
                               "cannot be written: creating a file next to it fails: " + detail::errno_text(code));
    }
    ::close(fd);
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
}

// Removes what killed writers left next to `path`: "<name>.tmp.<pid>.<n>" files (or staged
// directories) whose
// process no longer runs on this machine and that have not changed for `min_age`. The age
// guards a writer on another machine sharing the directory, whose pid means nothing here.
// Returns how many it removed.
inline int remove_stale_temporaries(const std::filesystem::path& path,
                                    std::chrono::seconds min_age = std::chrono::minutes(10)) {
    namespace fs = std::filesystem;
    const fs::path directory = path.has_parent_path() ? path.parent_path() : fs::path(".");
    const std::string prefix = path.filename().string() + ".tmp.";
    std::error_code error;
    int removed = 0;
    for (const auto& entry : fs::directory_iterator(directory, error)) {
        const std::string name = entry.path().filename().string();
        // Staged checkpoint directories (io/checkpoint_root.hpp) are temporaries too.
        const bool file_or_directory =
            entry.is_regular_file(error) || (!entry.is_symlink(error) && entry.is_directory(error));
        if (!name.starts_with(prefix) || !file_or_directory) continue;
        const std::string rest = name.substr(prefix.size());  // "<pid>.<n>"
        const auto dot = rest.find('.');
        if (dot == 0 || dot == std::string::npos) continue;
        pid_t pid = 0;
        try {
            pid = static_cast<pid_t>(std::stol(rest.substr(0, dot)));
        } catch (const std::exception&) {
            continue;
        }
        const bool alive = pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM);
        const auto age = fs::file_time_type::clock::now() - fs::last_write_time(entry.path(), error);
        if (alive || error || age < min_age) continue;
        if (fs::remove_all(entry.path(), error) > 0) ++removed;
    }
    return removed;
}

// Writes `contents` as the whole of `path`, atomically.
inline void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> contents) {
    atomic_file file(path);
    file.write(contents);
    file.commit();
}

// Streams the file through `fill`, which calls write() as often as it likes; if
// `fill` throws, the target is untouched and the exception propagates.
inline void write_file_atomically(const std::filesystem::path& path,
                                  const std::function<void(atomic_file&)>& fill) {
    atomic_file file(path);
    fill(file);
    file.commit();
}

}  // namespace weft::io
