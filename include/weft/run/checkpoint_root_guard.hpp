// A fresh run never writes over another run's checkpoints: a checkpoint root that already
// holds checkpoints is refused, naming them, unless the run resumes (--resume) or was told
// to replace them (--overwrite). Without it a new run's `latest` would move backwards and its
// pruning would delete the older run's saves without a word.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <system_error>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/io/checkpoint_root.hpp"

namespace weft::run {

// The step-<n> directories of `root`, in step order (none when root does not exist).
[[nodiscard]] inline std::vector<std::filesystem::path> checkpoints_in(const std::filesystem::path& root) {
    namespace fs = std::filesystem;
    std::vector<std::pair<std::uint64_t, fs::path>> found;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(root, error))
        if (const auto step = io::checkpoint_step(entry.path().filename().string()); step && entry.is_directory(error))
            found.emplace_back(*step, entry.path());
    std::sort(found.begin(), found.end());
    std::vector<fs::path> out;
    for (auto& [step, path] : found) out.push_back(std::move(path));
    return out;
}

// Refuses a fresh run into a root that holds checkpoints (or a `latest`), naming the newest
// and how many, unless `resuming` or `overwrite`. Not collective: the checkpoint writer asks.
inline void require_fresh_checkpoint_root(const std::filesystem::path& root, bool resuming, bool overwrite,
                                          std::string_view parameter = "--checkpoint-dir") {
    if (resuming || overwrite) return;
    const auto held = checkpoints_in(root);
    std::error_code error;
    const bool has_latest = std::filesystem::exists(root / io::latest_file_name, error);
    if (held.empty() && !has_latest) return;
    const std::string what =
        held.empty() ? std::string("a `latest` file")
                     : std::to_string(held.size()) + " checkpoint(s) of another run, the newest " +
                           held.back().filename().string();
    throw invalid_argument(parameter, root.string(),
                           "holds " + what +
                               "; a fresh run would replace them: continue that run with --resume " + root.string() +
                               ", give another --checkpoint-dir, or --overwrite to replace them");
}

// For --overwrite: removes the checkpoints and `latest` a fresh run replaces, just before its
// first save (not at the start, so a run that fails early costs the old ones nothing).
inline void remove_checkpoints(const std::filesystem::path& root) {
    std::error_code error;
    for (const auto& path : checkpoints_in(root)) std::filesystem::remove_all(path, error);
    std::filesystem::remove(root / io::latest_file_name, error);
}

}  // namespace weft::run
