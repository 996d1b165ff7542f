// The manifest of a checkpoint directory (docs/checkpoints.md): manifest.json, written last,
// says what the directory holds and proves it is whole. It records the model, the optimizer,
// the run's progress (step, data position, RNG key), the layout it was saved from, the run's
// own settings, and the size and SHA-256 of every file. A directory without it was never
// finished; a file that differs from it was damaged, truncated or swapped.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "weft/core/error.hpp"
#include "weft/io/atomic_file.hpp"
#include "weft/io/sha256.hpp"

namespace weft::io {

inline constexpr std::string_view manifest_file_name = "manifest.json";
inline constexpr std::string_view manifest_format = "weft-checkpoint";
inline constexpr int manifest_version = 1;

// The parallel layout a checkpoint was saved from: recorded so a user sees where it came
// from. Loading does not require it: a checkpoint loads under any layout.
struct checkpoint_layout {
    int pp = 1;
    int dp = 1;
    int tp = 1;
    int zero = 0;
    int chunks = 1;
    int microbatches = 1;
    int world = 1;
    std::string schedule;
    friend bool operator==(const checkpoint_layout&, const checkpoint_layout&) = default;
};

struct checkpoint_file_entry {
    std::string name;  // relative to the checkpoint directory, no directories
    std::uintmax_t bytes = 0;
    std::string sha256;  // lowercase hex, as sha256sum prints it
    friend bool operator==(const checkpoint_file_entry&, const checkpoint_file_entry&) = default;
};

struct checkpoint_manifest {
    std::string model;      // the model's description (Model::describe), "" when it has none
    std::string optimizer;  // "adamw", "sgd"
    std::uint64_t step = 0;
    std::uint64_t samples = 0;
    std::uint64_t rng_seed = 0;
    checkpoint_layout layout;
    nlohmann::json run = nlohmann::json::object();  // the trainer's settings, as it wants them kept
    std::vector<checkpoint_file_entry> files;

    [[nodiscard]] const checkpoint_file_entry* find(std::string_view name) const {
        for (const auto& file : files)
            if (file.name == name) return &file;
        return nullptr;
    }
};

// The size and SHA-256 of `directory / name`, for the manifest.
[[nodiscard]] inline checkpoint_file_entry describe_checkpoint_file(const std::filesystem::path& directory,
                                                                    const std::string& name) {
    const std::filesystem::path path = directory / name;
    return {name, std::filesystem::file_size(path), sha256_file(path)};
}

[[nodiscard]] inline nlohmann::json to_json(const checkpoint_manifest& m) {
    nlohmann::json files = nlohmann::json::object();
    for (const auto& file : m.files) files[file.name] = {{"bytes", file.bytes}, {"sha256", file.sha256}};
    return {{"format", manifest_format},
            {"version", manifest_version},
            {"model", m.model},
            {"optimizer", m.optimizer},
            {"progress", {{"step", m.step}, {"samples", m.samples}, {"rng_seed", m.rng_seed}}},
            {"layout",
             {{"pp", m.layout.pp}, {"dp", m.layout.dp}, {"tp", m.layout.tp}, {"zero", m.layout.zero},
              {"chunks", m.layout.chunks}, {"microbatches", m.layout.microbatches}, {"world", m.layout.world},
              {"schedule", m.layout.schedule}}},
            {"run", m.run},
            {"files", files}};
}

// Writes `directory/manifest.json` atomically. Write it last: its presence says the rest is there.
inline void write_manifest(const std::filesystem::path& directory, const checkpoint_manifest& manifest) {
    const std::string text = to_json(manifest).dump(2) + "\n";
    write_file_atomically(directory / manifest_file_name,
                          std::as_bytes(std::span<const char>(text.data(), text.size())));
}

namespace detail {

// Reads one field of a manifest, naming the file and the key when it is missing or of the
// wrong type.
class manifest_reader {
public:
    explicit manifest_reader(std::filesystem::path path) : path_(std::move(path)) {}

    [[nodiscard]] const nlohmann::json& at(const nlohmann::json& object, const std::string& key,
                                           const std::string& where) const {
        if (!object.is_object() || !object.contains(key))
            throw invalid_argument("manifest " + path_.string(), "no \"" + where + key + "\"",
                                   "must record it (is it a weft checkpoint manifest, of this version?)");
        return object.at(key);
    }
    [[nodiscard]] std::string text(const nlohmann::json& object, const std::string& key,
                                   const std::string& where = "") const {
        const auto& value = at(object, key, where);
        if (!value.is_string()) fail(where + key, value, "must be a string");
        return value.get<std::string>();
    }
    [[nodiscard]] std::uint64_t count(const nlohmann::json& object, const std::string& key,
                                      const std::string& where = "") const {
        const auto& value = at(object, key, where);
        if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<std::int64_t>() >= 0))
            fail(where + key, value, "must be a non-negative integer");
        return value.get<std::uint64_t>();
    }
    [[nodiscard]] int small_count(const nlohmann::json& object, const std::string& key,
                                  const std::string& where) const {
        const std::uint64_t value = count(object, key, where);
        if (value > (1u << 30)) fail(where + key, at(object, key, where), "must be at most 2^30");
        return static_cast<int>(value);
    }
    [[noreturn]] void fail(const std::string& key, const nlohmann::json& value, const std::string& expected) const {
        throw invalid_argument("\"" + key + "\" of manifest " + path_.string(), value.dump(), expected);
    }

private:
    std::filesystem::path path_;
};

}  // namespace detail

// Reads and checks `directory/manifest.json`. A directory without one was never finished
// (a save was killed, or a copy is incomplete): that is said, not a bare "cannot open".
[[nodiscard]] inline checkpoint_manifest read_manifest(const std::filesystem::path& directory) {
    const std::filesystem::path path = directory / manifest_file_name;
    if (!std::filesystem::is_regular_file(path))
        throw invalid_argument("checkpoint directory", directory.string(),
                               "must hold manifest.json, which a save writes last: without it the checkpoint "
                               "is torn (its save did not finish) or not a weft checkpoint");
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::json json;
    try {
        json = nlohmann::json::parse(text.str());
    } catch (const nlohmann::json::exception& e) {
        throw invalid_argument("manifest", path.string(), std::string("must be JSON: ") + e.what());
    }
    const detail::manifest_reader read(path);
    if (read.text(json, "format") != manifest_format)
        read.fail("format", json.at("format"), "must be \"" + std::string(manifest_format) + "\" (a foreign file)");
    if (read.count(json, "version") != manifest_version)
        read.fail("version", json.at("version"),
                  "must be " + std::to_string(manifest_version) + " (written by another weft version)");
    checkpoint_manifest m;
    m.model = read.text(json, "model");
    m.optimizer = read.text(json, "optimizer");
    const auto& progress = read.at(json, "progress", "");
    m.step = read.count(progress, "step", "progress.");
    m.samples = read.count(progress, "samples", "progress.");
    m.rng_seed = read.count(progress, "rng_seed", "progress.");
    const auto& layout = read.at(json, "layout", "");
    m.layout = {.pp = read.small_count(layout, "pp", "layout."),
                .dp = read.small_count(layout, "dp", "layout."),
                .tp = read.small_count(layout, "tp", "layout."),
                .zero = read.small_count(layout, "zero", "layout."),
                .chunks = read.small_count(layout, "chunks", "layout."),
                .microbatches = read.small_count(layout, "microbatches", "layout."),
                .world = read.small_count(layout, "world", "layout."),
                .schedule = read.text(layout, "schedule", "layout.")};
    m.run = read.at(json, "run", "");
    const auto& files = read.at(json, "files", "");
    if (!files.is_object()) read.fail("files", files, "must be an object of file name to bytes and sha256");
    for (const auto& [name, entry] : files.items()) {
        const std::string where = "files." + name + ".";
        if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
            read.fail("files", files, "must name files inside the checkpoint directory (\"" + name + "\" is not)");
        m.files.push_back({name, read.count(entry, "bytes", where), read.text(entry, "sha256", where)});
    }
    return m;
}

// Checks one file of a checkpoint against its manifest entry: present, a regular file, of
// the recorded size and SHA-256; the message names the file.
inline void verify_checkpoint_file(const std::filesystem::path& directory, const checkpoint_file_entry& file) {
    const std::filesystem::path path = directory / file.name;
    if (!std::filesystem::is_regular_file(path))
        throw invalid_argument("checkpoint file", path.string(),
                               "is missing: the manifest lists it (a partial copy of the checkpoint?)");
    const std::uintmax_t bytes = std::filesystem::file_size(path);
    if (bytes != file.bytes)
        throw invalid_argument("checkpoint file", path.string(),
                               "has " + std::to_string(bytes) + " bytes but the manifest records " +
                                   std::to_string(file.bytes) + ": it is truncated, damaged or from another "
                                   "checkpoint; nothing was loaded");
    if (sha256_file(path) != file.sha256)
        throw invalid_argument("checkpoint file", path.string(),
                               "has a SHA-256 other than the manifest's " + file.sha256 +
                                   ": it is damaged or from another checkpoint; nothing was loaded");
}

// The manifest's entry for `name`, refused when it has none (a foreign or hand-made manifest).
[[nodiscard]] inline const checkpoint_file_entry& required_entry(const std::filesystem::path& directory,
                                                                 const checkpoint_manifest& manifest,
                                                                 std::string_view name) {
    const checkpoint_file_entry* entry = manifest.find(name);
    if (entry == nullptr)
        throw invalid_argument("manifest " + (directory / manifest_file_name).string(),
                               "no entry for " + std::string(name),
                               "must list every file of the checkpoint (a foreign or hand-made manifest?)");
    return *entry;
}

// Checks every file the manifest lists (verify_checkpoint_file), and that `required` are
// among them. The first that differs is named.
inline void verify_checkpoint_files(const std::filesystem::path& directory, const checkpoint_manifest& manifest,
                                    std::initializer_list<std::string_view> required) {
    for (const std::string_view name : required) (void)required_entry(directory, manifest, name);
    for (const auto& file : manifest.files) verify_checkpoint_file(directory, file);
}

}  // namespace weft::io
