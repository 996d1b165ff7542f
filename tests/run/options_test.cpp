#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "weft/run/options.hpp"

namespace {

// Parses `args` with every option group; the exit code run::parse returns, if any.
std::optional<int> parse(std::vector<std::string> args, weft::run::settings& s, weft::run::gpt_sizes& g) {
    CLI::App app{"test"};
    weft::run::add_options(app, s, weft::run::options::all, g);
    args.insert(args.begin(), "test_run");
    std::vector<const char*> argv;
    for (const auto& a : args) argv.push_back(a.c_str());
    return weft::run::parse(app, static_cast<int>(argv.size()), argv.data());
}

}  // namespace

TEST_CASE("every option error exits 2, and help exits 0", "[run][options]") {
    weft::run::settings s;
    weft::run::gpt_sizes g;
    CHECK_FALSE(parse({"--pp", "2", "--steps", "010", "--layers", "3", "--switch", "2:dp=2"}, s, g).has_value());
    CHECK(s.pp == 2);
    CHECK(s.steps == 10);  // decimal, not octal
    CHECK(g.layers == 3);
    CHECK(s.switches == std::vector<std::string>{"2:dp=2"});
    // CLI11's own codes for these are 105 (validation), 109 (extras), 107 (requires), 114 (argument mismatch).
    for (const auto& bad : std::vector<std::vector<std::string>>{{"--steps", "-5"},
                                                                 {"--no-such-flag"},
                                                                 {"--checkpoint-every", "2"},
                                                                 {"--pp"},
                                                                 {"--lr", "nan"},
                                                                 {"--steps", "0x3"},
                                                                 {"--checkpoint-dir", ""},
                                                                 {"--data", ""}}) {
        weft::run::settings fresh;
        CAPTURE(bad);
        CHECK(parse(bad, fresh, g) == weft::run::exit_code::failed);
    }
    CHECK(parse({"--help"}, s, g) == weft::run::exit_code::done);
}

TEST_CASE("an empty path is refused by the option's name, not taken as none", "[run][options]") {
    std::string value = "";
    CHECK(weft::run::non_empty_path()(value).find("must name a path") != std::string::npos);
    value = "ck";
    CHECK(weft::run::non_empty_path()(value).empty());
}

TEST_CASE("the elastic options: --elastic first, each value checked", "[run][options][elastic]") {
    weft::run::gpt_sizes g;
    weft::run::settings s;
    CHECK_FALSE(parse({"--elastic", "--control", "ctl", "--world-max", "8", "--mirror-every", "5", "--leave-signal",
                       "USR2"},
                      s, g)
                    .has_value());
    CHECK(s.elastic);
    CHECK(s.control_file == "ctl");
    CHECK(s.world_max == 8);
    CHECK(s.mirror_every == 5);
    CHECK(s.leave_signal == "USR2");
    weft::run::settings defaults;
    CHECK_FALSE(parse({}, defaults, g).has_value());
    CHECK_FALSE(defaults.elastic);
    CHECK(defaults.world_max == 0);
    CHECK(defaults.mirror_every == 1);
    CHECK(defaults.leave_signal == "USR1");
    CHECK(defaults.join_control.empty());
    weft::run::settings joining;
    CHECK_FALSE(parse({"--elastic", "--join", "ctl"}, joining, g).has_value());
    CHECK(joining.join_control == "ctl");
    for (const auto& bad : std::vector<std::vector<std::string>>{{"--control", "ctl"},
                                                                 {"--join", "ctl"},
                                                                 {"--elastic", "--join", ""},
                                                                 {"--world-max", "8"},
                                                                 {"--mirror-every", "2"},
                                                                 {"--elastic", "--mirror-every", "0"},
                                                                 {"--elastic", "--world-max", "0"},
                                                                 {"--elastic", "--control", ""},
                                                                 {"--elastic", "--leave-signal", "TERM"}}) {
        weft::run::settings fresh;
        CAPTURE(bad);
        CHECK(parse(bad, fresh, g) == weft::run::exit_code::failed);
    }
    // The message names the flag that needs --elastic.
    CLI::App app{"test"};
    weft::run::settings fresh;
    weft::run::add_options(app, fresh, weft::run::options::elastic);
    const char* argv[] = {"test_run", "--world-max", "8"};
    try {
        app.parse(3, argv);
        FAIL("--world-max without --elastic was accepted");
    } catch (const CLI::ParseError& e) {
        CHECK(std::string(e.what()).find("--world-max requires --elastic") != std::string::npos);
    }
}

TEST_CASE("the elastic settings against the launch", "[run][options][elastic]") {
    const auto refusal = [](const weft::run::settings& s, bool on_mpi, int world) {
        try {
            (void)weft::run::check_elastic_settings(s, on_mpi, true, world);
        } catch (const weft::error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    weft::run::settings s;
    CHECK(weft::run::check_elastic_settings(s, false, false, 4).empty());  // not elastic: nothing to say
    s.elastic = true;
    CHECK(refusal(s, false, 4).find("--elastic needs the MPI communicator: launch with mpirun") != std::string::npos);
    CHECK(weft::run::check_elastic_settings(s, true, true, 4).empty());
    CHECK(weft::run::check_elastic_settings(s, true, false, 4) ==
          "built without MPI fault tolerance (ULFM): a crash of a rank ends the run (exit 2, newest checkpoint "
          "intact); leave and join still work; see docs/elastic.md");
    s.world_max = 3;
    CHECK(refusal(s, true, 4).find("--world-max = 3 is invalid: must be at least the ranks launched (4)") !=
          std::string::npos);
    s.world_max = 4;
    CHECK(refusal(s, true, 4).empty());
    s.leave_signal = "HUP";
    CHECK(refusal(s, true, 4).find("--leave-signal = \"HUP\" is invalid: must be USR1, USR2 or none") !=
          std::string::npos);
}
