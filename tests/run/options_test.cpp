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
