// --program (run/program_file.hpp): a compute-only program from PyTorch's CSV form, read and
// checked against the run before the first step, and trained by run::trainer as the schedule
// it was written from.
#include <catch2/catch.hpp>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "scratch_dir.hpp"
#include "weft/comm/local.hpp"
#include "weft/data/synthetic_dataset.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/models/mlp.hpp"
#include "weft/run/options.hpp"
#include "weft/run/program_file.hpp"
#include "weft/run/trainer.hpp"
#include "weft/sched/all_schedules.hpp"
#include "weft/sched/csv.hpp"
#include "weft/shard/any_zero.hpp"
#include "weft/train/engine.hpp"

namespace {

using program_engine =
    weft::engine<weft::sched::all_schedules, weft::shard::any_zero, weft::comm::local, weft::exec::cpu>;
const weft::nn::mlp_config program_mlp{.input_dim = 4, .hidden_dim = 8, .num_blocks = 2, .num_classes = 3, .seed = 1};

std::string write_file(const std::filesystem::path& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
}

weft::run::settings program_run(const std::string& program) {
    weft::run::settings s;
    s.pp = 2;
    s.microbatches = 2;
    s.batch = 8;
    s.steps = 3;
    s.lr = 1e-2;
    s.program = program;
    return s;
}

std::string read_error(const weft::run::settings& s, int units = 4) {
    try {
        (void)weft::run::read_run_program(s, units);
    } catch (const weft::error& e) {
        return e.what();
    }
    return "(no error)";
}

// The losses of a run's --log-json, in order.
std::vector<std::string> logged_losses(const std::filesystem::path& log) {
    std::vector<std::string> out;
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);) {
        const auto at = line.find("\"loss\": ");
        if (at != std::string::npos) out.push_back(line.substr(at + 8, line.find(',', at) - at - 8));
    }
    return out;
}

void train_mlp(const weft::run::settings& s) {
    const weft::data::synthetic_dataset dataset(4, 3, 2);
    weft::comm::local::run(2, [&](weft::comm::local& world) {
        weft::run::trainer<program_engine> t(world, s, program_mlp);
        t.run([&](std::uint64_t i) { return dataset.batch(static_cast<long long>(i), s.batch); });
    });
}

}  // namespace

TEST_CASE("--program is read and checked against --pp, --microbatches, --chunks and the model", "[run][program]") {
    const weft_test::scratch_dir dir("run_program_checks");
    const std::string good = write_file(dir.path / "1f1b.csv", "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
    const weft::sched::program p = weft::run::read_run_program(program_run(good), 4);
    CHECK(p == weft::sched::from_csv("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n"));
    const weft::parallel_config config = weft::run::program_config(program_run(good), p, 2);
    CHECK(config.chunks() == 1);
    CHECK_FALSE(config.schedule().chosen());

    const std::string quoted = "--program = \"" + good + "\" is invalid: ";
    auto s = program_run(good);
    s.pp = 1;
    CHECK_THAT(read_error(s), Catch::Contains(quoted + "holds 2 rank(s) (one per line) but --pp is 1"));
    s = program_run(good);
    s.microbatches = 4;
    CHECK_THAT(read_error(s), Catch::Contains(quoted + "holds 2 micro-batch(es) (0 .. 1) but --microbatches is 4"));
    s = program_run(good);
    s.chunks = 2;
    CHECK_THAT(read_error(s), Catch::Contains(quoted + "holds 1 chunk(s) per rank but --chunks is 2"));
    CHECK_THAT(read_error(program_run(good), 1),
               Catch::Contains(quoted + "holds 2 stages but the model has 1 units (layers + 2)"));
    s = program_run(good);
    s.partition = {1, 1, 2};
    CHECK_THAT(read_error(s), Catch::Contains("--partition") && Catch::Contains("one unit count per stage"));

    const std::string missing = (dir.path / "none.csv").string();
    CHECK_THAT(read_error(program_run(missing)),
               Catch::Contains("--program = \"" + missing + "\" is invalid: cannot open the file for reading"));
    CHECK_THAT(read_error(program_run(dir.path.string())), Catch::Contains("must be a regular file"));
    const std::string bad = write_file(dir.path / "bad.csv", "0F0,0B0\n1F0,1Q0\n");
    CHECK_THAT(read_error(program_run(bad)),
               Catch::Contains("--program = \"" + bad + "\" is invalid: csv cell at line 2 (rank 1), column 2"));
    const std::string deadlock = write_file(dir.path / "deadlock.csv", "0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n");
    CHECK_THAT(read_error(program_run(deadlock)), Catch::Contains("is invalid: is not a valid program"));
    // Stage-wide cells are read and checked, not refused.
    const std::string stage_wide =
        write_file(dir.path / "stage_wide.csv", "0F0,0F1,0B0,0B1,0REDUCE_GRAD\n1F0,1B0,1F1,1B1,1REDUCE_GRAD\n");
    CHECK(weft::run::read_run_program(program_run(stage_wide), 4).ranks[0].back().kind ==
          weft::sched::action_kind::REDUCE_GRAD);
}

TEST_CASE("--program refuses --switch and --elastic, and the command line --schedule", "[run][program]") {
    auto s = program_run("p.csv");
    s.switches = {"2:pp=1,dp=2"};
    CHECK_THROWS_WITH(weft::run::check_program_settings(s),
                      Catch::Contains("--switch = \"2:pp=1,dp=2\" is invalid: cannot be combined with --program p.csv"));
    s = program_run("p.csv");
    s.elastic = true;
    CHECK_THROWS_WITH(weft::run::check_program_settings(s),
                      Catch::Contains("--elastic") && Catch::Contains("cannot be combined with --program p.csv"));
    s.program.clear();
    CHECK_NOTHROW(weft::run::check_program_settings(s));
    // A library caller that fills settings directly gets --schedule's refusal too.
    s = program_run("p.csv");
    s.schedule = "gpipe";
    CHECK_THROWS_WITH(weft::run::check_program_settings(s),
                      Catch::Contains("--schedule = \"gpipe\" is invalid: cannot be combined with --program p.csv"));

    const auto parse_args = [](std::vector<std::string> args, weft::run::settings& into) {
        CLI::App app{"test"};
        weft::run::gpt_sizes g;
        weft::run::add_options(app, into, weft::run::options::all, g);
        args.insert(args.begin(), "test_run");
        std::vector<const char*> argv;
        for (const auto& a : args) argv.push_back(a.c_str());
        return weft::run::parse(app, static_cast<int>(argv.size()), argv.data());
    };
    weft::run::settings parsed;
    CHECK_FALSE(parse_args({"--program", "p.csv", "--pp", "2"}, parsed).has_value());
    CHECK(parsed.program == "p.csv");
    weft::run::settings both;
    CHECK(parse_args({"--program", "p.csv", "--schedule", "1f1b"}, both) == weft::run::exit_code::failed);
    weft::run::settings empty;
    CHECK(parse_args({"--program", ""}, empty) == weft::run::exit_code::failed);
}

TEST_CASE("the trainer runs --program with the losses of the schedule it was written from", "[run][program]") {
    const weft_test::scratch_dir dir("run_program_trains");
    const auto zb_h1 = weft::sched::generate(weft::sched::parse_schedule_kind("zb-h1"),
                                             weft::sched::schedule_params{.ranks = 2, .microbatches = 2});
    auto generated = program_run("");
    generated.schedule = "zb-h1";
    generated.log_json = (dir.path / "generated.jsonl").string();
    train_mlp(generated);
    // As weft-schedule writes it, and as PyTorch would, with stage-wide cells weft places itself.
    std::string with_cells = weft::sched::to_csv(zb_h1);
    with_cells.insert(with_cells.find('\n'), ",0REDUCE_GRAD");
    with_cells.insert(with_cells.size() - 1, ",1REDUCE_GRAD");
    for (const std::string& text : {weft::sched::to_csv(zb_h1), with_cells}) {
        INFO(text);
        auto from_file = program_run(write_file(dir.path / "zb_h1.csv", text));
        from_file.log_json = (dir.path / "program.jsonl").string();
        train_mlp(from_file);
        const auto losses = logged_losses(from_file.log_json);
        CHECK(losses.size() == 3);
        CHECK(losses == logged_losses(generated.log_json));
    }
}
