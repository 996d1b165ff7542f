#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "scratch_dir.hpp"
#include "weft/comm/local.hpp"
#include "weft/data/synthetic_dataset.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/models/mlp.hpp"
#include "weft/run/trainer.hpp"
#include "weft/sched/all_schedules.hpp"
#include "weft/shard/any_zero.hpp"
#include "weft/train/engine.hpp"

namespace {

using engine = weft::engine<weft::sched::all_schedules, weft::shard::any_zero, weft::comm::local, weft::exec::cpu>;
const weft::nn::mlp_config mlp{.input_dim = 4, .hidden_dim = 8, .num_blocks = 2, .num_classes = 3, .seed = 1};
const weft::data::synthetic_dataset data(4, 3, 2);

weft::run::settings small_run() {
    weft::run::settings s;
    s.pp = 2;
    s.microbatches = 2;
    s.batch = 8;
    s.steps = 4;
    s.lr = 1e-2;
    return s;
}

// Trains `s` on 2 rank threads; the batch source throws at `failing_position` (-1: never).
void train(const weft::run::settings& s, long long failing_position = -1, bool validation = false, int ranks = 2) {
    weft::comm::local::run(ranks, [&](weft::comm::local& world) {
        weft::run::trainer<engine> t(world, s, mlp);
        if (validation)
            t.validation([&](int b) {
                // As a token file shorter than its batches: the second batch cannot be read.
                if (b >= 1) throw weft::error("token file = \"short.bin\" is invalid: holds 100 tokens");
                return data.batch(b, s.batch);
            });
        t.run([&](std::uint64_t i) {
            if (static_cast<long long>(i) == failing_position) throw weft::error("planted bad batch");
            return data.batch(static_cast<long long>(i), s.batch);
        });
    });
}

std::string latest_of(const std::filesystem::path& root) {
    std::ifstream in(root / "latest");
    std::string line;
    std::getline(in, line);
    return line;
}

}  // namespace

TEST_CASE("the trainer trains to --steps and saves where and when it is told", "[run][trainer]") {
    const weft_test::scratch_dir dir("run_trainer");
    auto s = small_run();
    s.checkpoint_dir = (dir.path / "ck").string();
    s.checkpoint_every = 2;
    train(s);
    CHECK(std::filesystem::exists(dir.path / "ck" / "step-00000002" / "manifest.json"));
    CHECK(latest_of(dir.path / "ck") == "step-00000004");
    // Resumed to step 6: the run goes on from its checkpoint.
    s.resume = s.checkpoint_dir;
    s.steps = 6;
    train(s);
    CHECK(latest_of(dir.path / "ck") == "step-00000006");
}

TEST_CASE("a fresh run refuses a checkpoint root holding another run's checkpoints", "[run][trainer]") {
    const weft_test::scratch_dir dir("run_trainer_fresh");
    auto s = small_run();
    s.checkpoint_dir = (dir.path / "ck").string();
    train(s);
    s.steps = 2;  // a shorter run would move `latest` backwards
    CHECK_THROWS_WITH(train(s), Catch::Contains("--checkpoint-dir = \"" + s.checkpoint_dir +
                                                "\" is invalid: holds 1 checkpoint(s) of another run, the newest "
                                                "step-00000004; a fresh run would replace them") &&
                                    Catch::Contains("--overwrite"));
    CHECK(latest_of(dir.path / "ck") == "step-00000004");
    CHECK(std::filesystem::exists(dir.path / "ck" / "step-00000004" / "manifest.json"));
    s.overwrite = true;
    train(s);
    CHECK(latest_of(dir.path / "ck") == "step-00000002");
    CHECK_FALSE(std::filesystem::exists(dir.path / "ck" / "step-00000004"));
}

TEST_CASE("validation batches that cannot be read are found before the first step", "[run][trainer]") {
    const weft_test::scratch_dir dir("run_trainer_val");
    auto s = small_run();
    s.checkpoint_dir = (dir.path / "ck").string();
    s.val_batches = 2;
    CHECK_THROWS_WITH(train(s, -1, true), Catch::Contains("--val-data cannot give 2 validation batch(es)") &&
                                              Catch::Contains("holds 100 tokens"));
    CHECK_FALSE(std::filesystem::exists(dir.path / "ck" / "latest"));  // nothing trained, nothing saved
}

TEST_CASE("a batch that fails once training has begun leaves the newest state saved", "[run][trainer]") {
    const weft_test::scratch_dir dir("run_trainer_fail");
    auto s = small_run();
    s.checkpoint_dir = (dir.path / "ck").string();
    CHECK_THROWS_WITH(train(s, 3), Catch::Contains("planted bad batch (the state after step 3 is saved: continue with "
                                                   "--resume"));
    CHECK(latest_of(dir.path / "ck") == "step-00000003");
}

TEST_CASE("spares wait inside the trainer and every rank reaches the end", "[run][trainer]") {
    auto s = small_run();
    s.steps = 6;
    s.pp = 2;
    s.dp = 2;
    s.switches = {"2:world=2,pp=2", "4:pp=2,dp=2,world=4"};
    train(s, -1, false, 4);
}
