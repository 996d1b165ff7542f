// A checkpoint root: the folder a run saves its checkpoints into (train_gpt --checkpoint-dir).
// It holds one directory per saved step ("step-00000010") and a `latest` file naming the newest.
// A checkpoint directory is written under a temporary name and renamed into place when whole,
// and `latest` is replaced atomically after that, so a reader following `latest` always finds
// a finished checkpoint, whenever the writer was killed.
#pragma once

#include <fcntl.h>
#include <stdio.h>  // renameat2 (glibc)
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/io/atomic_file.hpp"
#include "weft/io/checkpoint_manifest.hpp"

namespace weft::io {

inline constexpr std::string_view latest_file_name = "latest";
inline constexpr std::string_view checkpoint_prefix = "step-";

// "step-00000010": zero-padded so that names sort as steps do.
[[nodiscard]] inline std::string checkpoint_name(std::uint64_t step) {
    char text[32];
    std::snprintf(text, sizeof text, "step-%08llu", static_cast<unsigned long long>(step));
    return text;
}

// The step of a checkpoint directory's name, or nothing for any other name.
[[nodiscard]] inline std::optional<std::uint64_t> checkpoint_step(std::string_view name) {
    if (!name.starts_with(checkpoint_prefix)) return std::nullopt;
    name.remove_prefix(checkpoint_prefix.size());
    std::uint64_t step = 0;
    const auto [end, error] = std::from_chars(name.data(), name.data() + name.size(), step);
    if (error != std::errc() || end != name.data() + name.size() || name.empty()) return std::nullopt;
    return step;
}

// Checks, before training, that `root` can take checkpoints: it is a directory (made if it
// is missing and its parent exists), and a file can be created in it.
inline void prepare_checkpoint_root(const std::filesystem::path& root, std::string_view parameter) {
    namespace fs = std::filesystem;
    require(!root.empty(), parameter, "\"\"", "must name a directory");
    std::error_code error;
    const auto status = fs::status(root, error);
    if (status.type() == fs::file_type::not_found) {
        if (!fs::create_directory(root, error) && error)
            throw invalid_argument(parameter, root.string(), "cannot be created: " + error.message());
    } else if (status.type() != fs::file_type::directory) {
        throw invalid_argument(parameter, root.string(), "is not a directory; name a directory for checkpoints");
    }
    require_writable(root / latest_file_name, parameter);
    // Directories and files that killed saves left (older than 10 minutes, of dead processes).
    std::vector<fs::path> staged_for;
    for (const auto& entry : fs::directory_iterator(root, error)) {
        const std::string name = entry.path().filename().string();
        const auto tmp = name.find(".tmp.");
        if (tmp != std::string::npos && checkpoint_step(std::string_view(name).substr(0, tmp)))
            staged_for.push_back(root / name.substr(0, tmp));
    }
    for (const auto& target : staged_for) remove_stale_temporaries(target);
    remove_stale_temporaries(root / latest_file_name);
}

// Moves a finished, synced `staged` directory to `target`. A checkpoint already there (the
// same step saved again) is swapped out atomically (renameat2 RENAME_EXCHANGE), so the
// target never goes missing, and then removed.
inline void commit_directory(const std::filesystem::path& staged, const std::filesystem::path& target) {
    namespace fs = std::filesystem;
    const auto sync_directory = [](const fs::path& directory) {
        const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0) {
            (void)::fsync(fd);
            ::close(fd);
        }
    };
    sync_directory(staged);
    std::error_code error;
    if (fs::exists(fs::symlink_status(target, error))) {
        require(fs::is_directory(fs::symlink_status(target, error)), "checkpoint directory", target.string(),
                "is there and is not a directory; remove it");
        if (::renameat2(AT_FDCWD, staged.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0)
            detail::throw_file_error(target, "cannot exchange the new checkpoint with the old one", errno);
        fs::remove_all(staged, error);  // now the old one
    } else if (::rename(staged.c_str(), target.c_str()) != 0) {
        detail::throw_file_error(target, "cannot rename the finished checkpoint into place", errno);
    }
    sync_directory(target.has_parent_path() ? target.parent_path() : fs::path("."));
}

// Points `root/latest` at `name`, atomically.
inline void publish_latest(const std::filesystem::path& root, const std::string& name) {
    const std::string text = name + "\n";
    write_file_atomically(root / latest_file_name, std::as_bytes(std::span<const char>(text.data(), text.size())));
}

// The name `root/latest` holds (its first line), or "" when there is none.
[[nodiscard]] inline std::string read_latest(const std::filesystem::path& root) {
    std::ifstream in(root / latest_file_name);
    std::string name;
    std::getline(in, name);
    return name;
}

// The checkpoint directory `path` names: a checkpoint itself (it holds manifest.json), or a
// root whose `latest` names one. Anything else is refused, naming `parameter`.
[[nodiscard]] inline std::filesystem::path resolve_checkpoint(const std::filesystem::path& path,
                                                              std::string_view parameter) {
    namespace fs = std::filesystem;
    if (!fs::is_directory(path))
        throw invalid_argument(parameter, path.string(),
                               fs::exists(path) ? "is not a directory: name a checkpoint directory or the "
                                                  "--checkpoint-dir of a run (for a .safetensors file use --init-from)"
                                                : "does not exist");
    if (fs::exists(path / manifest_file_name)) return path;
    const fs::path latest = path / latest_file_name;
    if (!fs::exists(latest)) {
        throw invalid_argument(parameter, path.string(),
                               "holds neither manifest.json (a checkpoint) nor latest (a checkpoint root); a "
                               "checkpoint directory without manifest.json is torn: its save did not finish");
    }
    const std::string name = read_latest(path);
    if (!checkpoint_step(name)) {
        // Shown escaped: a binary file, or one cut at a NUL, printed raw would garble the
        // terminal or end the message mid-way.
        std::string shown;
        bool text = true;
        for (const char c : name.substr(0, 64)) {
            const auto byte = static_cast<unsigned char>(c);
            if (byte >= 0x20 && byte < 0x7f) {
                shown += c;
            } else {
                text = false;
                char hex[8];
                std::snprintf(hex, sizeof hex, "\\x%02x", byte);
                shown += hex;
            }
        }
        if (name.size() > 64) shown += "...";
        throw invalid_argument("file " + latest.string(), shown,
                               std::string(text ? "" : "is not text (its bytes escaped as \\xHH); ") +
                                   "must name a checkpoint directory of this root, step-<number>");
    }
    return path / name;
}

// Removes the oldest step-<n> directories of `root` until `keep` are left (0 keeps all).
// The one `latest` names is never removed. Returns the directories removed.
inline std::vector<std::filesystem::path> prune_checkpoints(const std::filesystem::path& root, int keep) {
    namespace fs = std::filesystem;
    require(keep >= 0, "keep", keep, "must be >= 0 (0 keeps every checkpoint)");
    std::vector<fs::path> removed;
    if (keep == 0) return removed;
    std::vector<std::pair<std::uint64_t, fs::path>> checkpoints;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(root, error))
        if (const auto step = checkpoint_step(entry.path().filename().string());
            step && entry.is_directory(error) && fs::exists(entry.path() / manifest_file_name))
            checkpoints.emplace_back(*step, entry.path());
    std::sort(checkpoints.begin(), checkpoints.end());
    const std::string latest = read_latest(root);
    const std::size_t excess =
        checkpoints.size() > static_cast<std::size_t>(keep) ? checkpoints.size() - static_cast<std::size_t>(keep) : 0;
    for (std::size_t i = 0; i < excess; ++i) {
        if (checkpoints[i].second.filename() == latest) continue;
        fs::remove_all(checkpoints[i].second, error);
        if (!error) removed.push_back(checkpoints[i].second);
    }
    return removed;
}

// A checkpoint directory while it is written. path() is a name in the root that only this
// process uses, so that the rename into place stays on one file system; commit() renames it
// to root/step-<n> once its manifest (written last) is there. A save that throws before its
// commit leaves nothing: the destructor removes what it wrote. `writer` false is a rank of a
// collective save that writes no file: it makes and removes nothing. `parameter` names the
// option in the error when the directory cannot be made.
class staged_checkpoint {
public:
    staged_checkpoint(const std::filesystem::path& root, std::uint64_t step, std::string_view parameter,
                      bool writer = true)
        : root_(root),
          name_(checkpoint_name(step)),
          target_(root / name_),
          staged_(detail::temporary_path_for(target_)),
          writer_(writer) {
        if (!writer_) return;
        std::error_code error;
        if (!std::filesystem::create_directory(staged_, error))
            throw invalid_argument(parameter, root.string(),
                                   "cannot take a new checkpoint: creating " + staged_.string() +
                                       " fails: " + (error ? error.message() : "it exists"));
    }
    staged_checkpoint(const staged_checkpoint&) = delete;
    staged_checkpoint& operator=(const staged_checkpoint&) = delete;
    ~staged_checkpoint() {
        std::error_code ignored;
        if (writer_ && !committed_) std::filesystem::remove_all(staged_, ignored);
    }

    [[nodiscard]] const std::filesystem::path& path() const { return staged_; }
    [[nodiscard]] const std::filesystem::path& target() const { return target_; }
    // The directory is whole: it takes its place (commit_directory).
    void commit() {
        commit_directory(staged_, target_);
        committed_ = true;
    }
    // After commit: `latest` names it, and the newest `keep` checkpoints are kept (0: all).
    // Returns the directories removed.
    std::vector<std::filesystem::path> publish(int keep) {
        require(committed_, "checkpoint", target_.string(), "must be committed before it is published");
        publish_latest(root_, name_);
        return prune_checkpoints(root_, keep);
    }

private:
    std::filesystem::path root_;
    std::string name_;
    std::filesystem::path target_;
    std::filesystem::path staged_;
    bool writer_;
    bool committed_ = false;
};

}  // namespace weft::io
