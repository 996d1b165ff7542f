// Checkpoint directories without an engine: SHA-256 against the FIPS 180-4 examples, the
// manifest written and read back, every file checked against it (a torn, truncated, damaged
// or foreign checkpoint is refused, naming the file), and the root's names, `latest` pointer,
// pruning, atomic directory commit, staged saves and clean-up of what killed saves left.
#include "weft/io/checkpoint_manifest.hpp"
#include "weft/io/checkpoint_root.hpp"
#include "weft/io/sha256.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "file_contents.hpp"
#include "scratch_dir.hpp"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using weft_test::read_text;
using weft_test::scratch_dir;

namespace {

std::string hash_of(const std::string& text) {
    return weft::io::sha256_hex(std::as_bytes(std::span(text.data(), text.size())));
}

void write_text(const fs::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
}

// A checkpoint directory with two small files and a manifest that lists them.
weft::io::checkpoint_manifest make_checkpoint(const fs::path& dir) {
    fs::create_directories(dir);
    write_text(dir / "model.safetensors", "weights weights weights");
    write_text(dir / "optimizer.safetensors", "moments");
    weft::io::checkpoint_manifest m{
        .model = "gpt layers=2",
        .optimizer = "adamw",
        .step = 12,
        .samples = 96,
        .rng_seed = 1234,
        .layout =
            {.pp = 2, .dp = 2, .tp = 1, .zero = 1, .chunks = 1, .microbatches = 4, .world = 4, .schedule = "zb-h1"},
        .run = {{"lr", 0.001}, {"batch", 8}},
        .files = {}};
    for (const char* name : {"model.safetensors", "optimizer.safetensors"})
        m.files.push_back(weft::io::describe_checkpoint_file(dir, name));
    weft::io::write_manifest(dir, m);
    return m;
}

void verify(const fs::path& dir) {
    weft::io::verify_checkpoint_files(dir, weft::io::read_manifest(dir),
                                      {"model.safetensors", "optimizer.safetensors"});
}

}  // namespace

TEST_CASE("SHA-256 gives the FIPS 180-4 digests", "[io][checkpoint]") {
    CHECK(hash_of("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(hash_of("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(hash_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    // A million bytes crosses the padding cases and the file reader's 1 MiB pieces.
    const std::string million(1'000'000, 'a');
    CHECK(hash_of(million) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    const scratch_dir dir("sha256");
    const std::string twice = million + million;
    write_text(dir.path / "a", twice);
    weft::io::sha256 pieces;  // fed unevenly: the same digest as the file in one go
    for (std::size_t at = 0; at < twice.size();) {
        const std::size_t take = std::min<std::size_t>(1 + at % 97, twice.size() - at);
        pieces.update(std::as_bytes(std::span(twice.data() + at, take)));
        at += take;
    }
    CHECK(weft::io::sha256_file(dir.path / "a") == pieces.hex_digest());
    CHECK_THROWS_WITH(weft::io::sha256_file(dir.path / "missing"), Contains("cannot be opened"));
}

TEST_CASE("a manifest is read back as written, and its files check against it", "[io][checkpoint]") {
    const scratch_dir dir("manifest");
    const auto written = make_checkpoint(dir.path / "step-00000012");
    const auto read = weft::io::read_manifest(dir.path / "step-00000012");
    CHECK(read.model == written.model);
    CHECK(read.optimizer == "adamw");
    CHECK(read.step == 12);
    CHECK(read.samples == 96);
    CHECK(read.rng_seed == 1234);
    CHECK(read.layout == written.layout);
    CHECK(read.run == written.run);
    CHECK(read.files == written.files);
    CHECK(read.files[0].sha256 == hash_of("weights weights weights"));
    CHECK_NOTHROW(verify(dir.path / "step-00000012"));
    CHECK_THROWS_WITH(weft::io::verify_checkpoint_files(dir.path / "step-00000012", read, {"extra.safetensors"}),
                      Contains("no entry for extra.safetensors"));
}

TEST_CASE("a torn, truncated, damaged or foreign checkpoint is refused, naming the file", "[io][checkpoint]") {
    const scratch_dir dir("manifest_bad");
    const fs::path ckpt = dir.path / "step-00000012";
    make_checkpoint(ckpt);
    SECTION("torn: the save was killed before the manifest") {
        fs::remove(ckpt / "manifest.json");
        CHECK_THROWS_WITH(weft::io::read_manifest(ckpt), Contains("must hold manifest.json") && Contains("torn"));
    }
    SECTION("truncated file") {
        fs::resize_file(ckpt / "model.safetensors", 5);
        CHECK_THROWS_WITH(verify(ckpt), Contains("model.safetensors") && Contains("has 5 bytes but the manifest "
                                                                                  "records 23"));
    }
    SECTION("same size, other bytes") {
        write_text(ckpt / "optimizer.safetensors", "MOMENTS");
        CHECK_THROWS_WITH(verify(ckpt), Contains("optimizer.safetensors") && Contains("SHA-256"));
    }
    SECTION("a listed file is missing") {
        fs::remove(ckpt / "optimizer.safetensors");
        CHECK_THROWS_WITH(verify(ckpt), Contains("optimizer.safetensors") && Contains("is missing"));
    }
    SECTION("foreign or malformed manifests") {
        auto text = read_text(ckpt / "manifest.json");
        SECTION("another format") {
            text.replace(text.find("weft-checkpoint"), 15, "something-else!");
            write_text(ckpt / "manifest.json", text);
            CHECK_THROWS_WITH(weft::io::read_manifest(ckpt), Contains("\"format\"") && Contains("foreign"));
        }
        SECTION("not JSON") {
            write_text(ckpt / "manifest.json", text.substr(0, text.size() / 2));
            CHECK_THROWS_WITH(weft::io::read_manifest(ckpt), Contains("must be JSON"));
        }
        SECTION("a negative step") {
            text.replace(text.find("\"step\": 12"), 10, "\"step\": -1");
            write_text(ckpt / "manifest.json", text);
            CHECK_THROWS_WITH(weft::io::read_manifest(ckpt),
                              Contains("\"progress.step\"") && Contains("non-negative integer"));
        }
        SECTION("a file outside the directory") {
            text.replace(text.find("\"model.safetensors\""), 19, "\"../x.safetensors\"");
            write_text(ckpt / "manifest.json", text);
            CHECK_THROWS_WITH(weft::io::read_manifest(ckpt), Contains("inside the checkpoint directory"));
        }
    }
}

TEST_CASE("a checkpoint root names, points at, prunes and commits checkpoints", "[io][checkpoint]") {
    const scratch_dir dir("root");
    const fs::path root = dir.path / "ckpt";
    CHECK(weft::io::checkpoint_name(10) == "step-00000010");
    CHECK(weft::io::checkpoint_step("step-00000010") == 10u);
    CHECK(weft::io::checkpoint_step("step-123456789012") == 123456789012u);
    CHECK_FALSE(weft::io::checkpoint_step("step-"));
    CHECK_FALSE(weft::io::checkpoint_step("step-12.tmp.3.4"));
    CHECK_FALSE(weft::io::checkpoint_step("latest"));

    weft::io::prepare_checkpoint_root(root, "--checkpoint-dir");  // made, as its parent exists
    CHECK(fs::is_directory(root));
    CHECK_THROWS_WITH(weft::io::resolve_checkpoint(root, "--resume"), Contains("holds neither manifest.json"));
    CHECK_THROWS_WITH(weft::io::resolve_checkpoint(root / "nope", "--resume"), Contains("does not exist"));

    for (const std::uint64_t step : {2, 4, 6, 8}) {
        const fs::path staged = dir.path / ("staged" + std::to_string(step));
        make_checkpoint(staged);
        weft::io::commit_directory(staged, root / weft::io::checkpoint_name(step));
        weft::io::publish_latest(root, weft::io::checkpoint_name(step));
        CHECK_FALSE(fs::exists(staged));
    }
    CHECK(weft::io::resolve_checkpoint(root, "--resume") == root / "step-00000008");
    CHECK(weft::io::resolve_checkpoint(root / "step-00000004", "--resume") == root / "step-00000004");

    // The same step committed again replaces the old directory whole.
    const fs::path again = dir.path / "again";
    make_checkpoint(again);
    write_text(again / "marker", "new");
    weft::io::commit_directory(again, root / "step-00000008");
    CHECK(read_text(root / "step-00000008" / "marker") == "new");
    CHECK_FALSE(fs::exists(again));

    const auto removed = weft::io::prune_checkpoints(root, 2);
    CHECK(removed.size() == 2);
    CHECK_FALSE(fs::exists(root / "step-00000002"));
    CHECK_FALSE(fs::exists(root / "step-00000004"));
    CHECK(fs::exists(root / "step-00000006"));
    CHECK(fs::exists(root / "step-00000008"));
    // `latest` is never pruned, even when it is not among the newest.
    weft::io::publish_latest(root, "step-00000006");
    CHECK(weft::io::prune_checkpoints(root, 1).empty());
    CHECK(fs::exists(root / "step-00000006"));
    CHECK_THROWS_WITH(weft::io::prune_checkpoints(root, -1), Contains("must be >= 0"));

    write_text(root / "latest", "../../etc\n");
    CHECK_THROWS_WITH(weft::io::resolve_checkpoint(root, "--resume"), Contains("must name a checkpoint directory"));
    // A binary `latest`, or one cut at a NUL, is shown escaped, whole, and said not to be text.
    write_text(root / "latest", std::string("step-0000\0\x01\xff"
                                            "08\n",
                                            15));
    CHECK_THROWS_WITH(weft::io::resolve_checkpoint(root, "--resume"),
                      Contains("= \"step-0000\\x00\\x01\\xff08\" is invalid: is not text") &&
                          Contains("must name a checkpoint directory"));
    write_text(dir.path / "file", "x");
    CHECK_THROWS_WITH(weft::io::prepare_checkpoint_root(dir.path / "file", "--checkpoint-dir"),
                      Contains("--checkpoint-dir") && Contains("is not a directory"));
    CHECK_THROWS_WITH(weft::io::prepare_checkpoint_root(dir.path / "no" / "such", "--checkpoint-dir"),
                      Contains("cannot be created"));
}

TEST_CASE("a staged checkpoint a killed save left is removed once stale", "[io][checkpoint]") {
    const scratch_dir dir("root_stale");
    const fs::path root = dir.path / "ckpt";
    fs::create_directories(root);
    // A pid that cannot be running: above the kernel's pid_max.
    const fs::path dead = root / "step-00000004.tmp.4194399.0";
    const fs::path live = root / ("step-00000006.tmp." + std::to_string(::getpid()) + ".0");
    make_checkpoint(dead);
    make_checkpoint(live);
    const auto old = fs::file_time_type::clock::now() - std::chrono::hours(1);
    fs::last_write_time(dead, old);
    fs::last_write_time(live, old);
    weft::io::prepare_checkpoint_root(root, "--checkpoint-dir");
    CHECK_FALSE(fs::exists(dead));
    CHECK(fs::exists(live));  // its writer (this process) still runs
}

TEST_CASE("a staged checkpoint takes its place when committed and leaves nothing when not", "[io][checkpoint]") {
    const scratch_dir dir("root_staged");
    const fs::path root = dir.path / "ckpt";
    weft::io::prepare_checkpoint_root(root, "--checkpoint-dir");
    const auto entries = [&] {
        std::vector<std::string> names;
        for (const auto& e : fs::directory_iterator(root)) names.push_back(e.path().filename().string());
        std::sort(names.begin(), names.end());
        return names;
    };
    // A save that throws before its commit: its directory goes with it.
    fs::path abandoned;
    try {
        weft::io::staged_checkpoint staged(root, 3, "--checkpoint-dir");
        abandoned = staged.path();
        CHECK(abandoned.parent_path() == root);  // the rename stays on one file system
        CHECK(fs::is_directory(abandoned));
        make_checkpoint(abandoned);
        throw std::runtime_error("the disk is full");
    } catch (const std::runtime_error&) {
    }
    CHECK_FALSE(fs::exists(abandoned));
    CHECK(entries().empty());

    // Committed and published: in place, named by `latest`, the older ones pruned to `keep`.
    for (const std::uint64_t step : {1, 2, 3}) {
        weft::io::staged_checkpoint staged(root, step, "--checkpoint-dir");
        CHECK(staged.target() == root / weft::io::checkpoint_name(step));
        CHECK_THROWS_WITH(staged.publish(0), Contains("must be committed before it is published"));
        make_checkpoint(staged.path());
        staged.commit();
        const auto pruned = staged.publish(2);
        CHECK(pruned.size() == (step == 3 ? 1u : 0u));
    }
    CHECK(entries() == std::vector<std::string>{"latest", "step-00000002", "step-00000003"});
    CHECK(weft::io::resolve_checkpoint(root, "--resume") == root / "step-00000003");

    // A rank of a collective save that writes nothing makes nothing and removes nothing.
    { const weft::io::staged_checkpoint reader(root, 4, "checkpoint directory", /*writer=*/false); }
    CHECK(entries().size() == 3);
    // A root that is not there: the error names the option and the root.
    CHECK_THROWS_WITH(weft::io::staged_checkpoint(dir.path / "gone", 5, "--checkpoint-dir"),
                      Contains("--checkpoint-dir") && Contains("gone") && Contains("cannot take a new checkpoint"));
}
