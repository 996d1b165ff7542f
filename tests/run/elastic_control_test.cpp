#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "weft/run/elastic_control.hpp"

namespace {

using weft::run::control_command;

// What parse_control_line throws for `line` (empty when it does not throw).
std::string control_parse_error(const std::string& line) {
    try {
        (void)weft::run::parse_control_line(line);
    } catch (const weft::error& e) {
        return e.what();
    }
    return {};
}

std::string control_check_error(const control_command& command, int world, int world_max) {
    try {
        weft::run::check_control_command(command, world, world_max);
    } catch (const weft::error& e) {
        return e.what();
    }
    return {};
}

// A fresh directory for one test's control files.
std::filesystem::path control_test_dir(const std::string& name) {
    const auto dir = std::filesystem::temp_directory_path() / ("weft_control_test_" + name);
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    return dir;
}

void control_append(const std::filesystem::path& file, const std::string& text) {
    std::ofstream out(file, std::ios::app | std::ios::binary);
    out << text;
}

}  // namespace

TEST_CASE("control lines: leave and grow, ranges, duplicates, comments and blanks", "[run][elastic]") {
    using weft::run::parse_control_line;
    CHECK(parse_control_line("leave 3") == control_command::leave({3}));
    CHECK(parse_control_line("leave 1,3-4") == control_command::leave({1, 3, 4}));
    CHECK(parse_control_line("  leave 4-5 , 0\t\r") == control_command::leave({0, 4, 5}));
    CHECK(parse_control_line("leave 2,1-3,2") == control_command::leave({1, 2, 3}));  // each once, sorted
    CHECK(parse_control_line("leave 7-7") == control_command::leave({7}));
    CHECK(parse_control_line("grow 2") == control_command::grow(2));
    CHECK(parse_control_line("\tgrow   12  # two racks back") == control_command::grow(12));
    CHECK(parse_control_line("accept 2") == control_command::accept(2));
    CHECK_FALSE(parse_control_line("").has_value());
    CHECK_FALSE(parse_control_line("   \t").has_value());
    CHECK_FALSE(parse_control_line("# leave 1").has_value());
    CHECK_FALSE(parse_control_line("  # anything at all").has_value());
    CHECK(weft::run::format_ranks({5, 1, 3, 4, 1}) == "1,3-5");
    CHECK(weft::run::to_string(control_command::leave({0, 1, 2, 6})) == "leave 0-2,6");
    CHECK(weft::run::to_string(control_command::grow(3)) == "grow 3");
    CHECK(weft::run::to_string(control_command::accept(2)) == "accept 2");
}

TEST_CASE("a control line that cannot be parsed is quoted with the valid forms", "[run][elastic]") {
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"lave 1", "\"lave\" is not a command"},
        {"leave", "leave needs the ranks that leave"},
        {"leave 1 2", "\"1 2\" is not a rank"},
        {"leave 1,,2", "an empty item in the rank list \"1,,2\""},
        {"leave 1,", "an empty item"},
        {"leave -1", "\"-1\" is not a rank"},
        {"leave a", "\"a\" is not a rank"},
        {"leave 4-2", "the range \"4-2\" ends before it starts"},
        {"leave 0-99999999999", "is not a rank"},
        {"leave 65536", "is not a rank"},
        {"grow", "grow needs a count N"},
        {"grow 0", "the count \"0\" is not a whole number in [1, 65536]"},
        {"grow -1", "the count \"-1\""},
        {"grow 2 3", "the count \"2 3\""},
        {"grow 0x3", "the count \"0x3\""},
        {"accept", "accept needs a count N"},
        {"accept 0", "the count \"0\" is not a whole number in [1, 65536]"},
        {"GROW 1", "\"GROW\" is not a command"}};
    for (const auto& [line, why] : bad) {
        CAPTURE(line);
        const auto message = control_parse_error(line);
        CHECK(message.find("control line \"" + line + "\" cannot be parsed: ") != std::string::npos);
        CHECK(message.find(why) != std::string::npos);
        CHECK(message.find("the valid forms are \"leave RANKS\"") != std::string::npos);
        CHECK(message.find("\"grow N\" (N >= 1)") != std::string::npos);
        CHECK(message.find("\"accept N\" (N >= 1, written by a job launched with --join)") != std::string::npos);
    }
}

TEST_CASE("a command is checked against the world it would change", "[run][elastic]") {
    CHECK(control_check_error(control_command::leave({1, 3}), 4, 4).empty());
    CHECK(control_check_error(control_command::leave({0, 1, 2}), 4, 4).empty());
    CHECK(control_check_error(control_command::leave({4}), 4, 4).find(
              "leave rank = 4 is invalid: must be a rank of the world, in [0, 4)") != std::string::npos);
    CHECK(control_check_error(control_command::leave({0, 1, 2, 3}), 4, 4).find(
              "leave = \"0-3\" is invalid: would leave no rank of the 4; at most 3 may leave") != std::string::npos);
    CHECK(control_check_error(control_command::leave({}), 4, 4).find("must name at least one rank") !=
          std::string::npos);
    CHECK(control_check_error(control_command::grow(2), 4, 6).empty());
    CHECK(control_check_error(control_command::grow(3), 4, 6).find(
              "grow = 3 is invalid: would make 7 ranks, past --world-max 6; at most 2 more may join") !=
          std::string::npos);
    CHECK(control_check_error(control_command::grow(1), 4, 4).find("at most 0 more may join") != std::string::npos);
    CHECK(control_check_error(control_command::grow(1), 4, 0).find("--world-max = 0 is invalid") != std::string::npos);
    CHECK(control_check_error(control_command::accept(2), 4, 6).empty());
    CHECK(control_check_error(control_command::accept(3), 4, 6).find(
              "accept = 3 is invalid: would make 7 ranks, past --world-max 6") != std::string::npos);
}

TEST_CASE("the control file: history is checked and not applied, appended lines come once", "[run][elastic]") {
    const auto dir = control_test_dir("watch");
    const auto file = dir / "control";
    control_append(file, "# an earlier run's\nleave 1\ngrow 2\n");
    weft::run::control_file control(file.string());
    CHECK(control.poll().empty());  // history
    CHECK(control.lines() == 3);
    control_append(file, "leave 2,3\n\n# note\ngrow 1\n");
    CHECK(control.poll() == std::vector<control_command>{control_command::leave({2, 3}), control_command::grow(1)});
    CHECK(control.poll().empty());  // each once
    // A line still being written waits for its end.
    control_append(file, "gro");
    CHECK(control.poll().empty());
    control_append(file, "w 4");
    CHECK(control.poll().empty());
    control_append(file, "\nleave 0\n");
    CHECK(control.poll() == std::vector<control_command>{control_command::grow(4), control_command::leave({0})});
    // A bad line at run time is skipped and counted; the run goes on with the next one.
    CHECK(control.rejected() == 0);
    control_append(file, "leave x\ngrow 1\n");
    CHECK(control.poll() == std::vector<control_command>{control_command::grow(1)});
    CHECK(control.rejected() == 1);
    CHECK(control.lines() == 11);
    std::filesystem::remove_all(dir);
}

TEST_CASE("the control file: a last line being written at the start is history too", "[run][elastic]") {
    const auto dir = control_test_dir("partial");
    const auto file = dir / "control";
    control_append(file, "leave 1\ngrow");
    weft::run::control_file control(file.string());
    control_append(file, " 2\ngrow 3\n");
    CHECK(control.poll() == std::vector<control_command>{control_command::grow(3)});
    std::filesystem::remove_all(dir);
}

TEST_CASE("the control file: a bad history line stops the run before it trains, naming FILE:LINE",
          "[run][elastic]") {
    const auto dir = control_test_dir("history");
    const auto file = dir / "control";
    control_append(file, "leave 1\n\ngrow two\n");
    try {
        weft::run::control_file control(file.string());
        FAIL("a bad history line was accepted");
    } catch (const weft::error& e) {
        const std::string message = e.what();
        CHECK(message.find("--control " + file.string() + ":3: control line \"grow two\" cannot be parsed") !=
              std::string::npos);
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("the control file: a missing file is created, a missing directory is refused", "[run][elastic]") {
    const auto dir = control_test_dir("missing");
    const auto file = dir / "control";
    {
        weft::run::control_file control(file.string());
        CHECK(std::filesystem::exists(file));
        CHECK(control.poll().empty());
        control_append(file, "grow 1\n");
        CHECK(control.poll() == std::vector<control_command>{control_command::grow(1)});
    }
    const auto nowhere = dir / "no_such_dir" / "control";
    try {
        weft::run::control_file control(nowhere.string());
        FAIL("a control file in a missing directory was accepted");
    } catch (const weft::error& e) {
        const std::string message = e.what();
        CHECK(message.find("--control = \"" + nowhere.string() + "\" is invalid: its directory") != std::string::npos);
        CHECK(message.find("does not exist") != std::string::npos);
    }
    try {
        weft::run::control_file control(dir.string());
        FAIL("a directory was accepted as the control file");
    } catch (const weft::error& e) {
        CHECK(std::string(e.what()).find("must be a regular file") != std::string::npos);
    }
    std::filesystem::remove_all(dir);
}

TEST_CASE("the control file: a file truncated and written again is read from its start", "[run][elastic]") {
    const auto dir = control_test_dir("truncated");
    const auto file = dir / "control";
    control_append(file, "# a long comment line that makes the file longer than the next one\n");
    weft::run::control_file control(file.string());
    { std::ofstream(file, std::ios::trunc) << "leave 2\n"; }
    CHECK(control.poll() == std::vector<control_command>{control_command::leave({2})});
    std::filesystem::remove_all(dir);
}

TEST_CASE("the control file: a watcher made at another's position goes on where it stopped", "[run][elastic]") {
    const auto dir = control_test_dir("hand_over");
    const auto file = dir / "control";
    control_append(file, "grow 2\n");
    weft::run::control_file first(file.string());
    control_append(file, "leave 0\ngrow 1\nleave");  // the last line is still being written
    CHECK(first.poll() == std::vector<control_command>{control_command::leave({0}), control_command::grow(1)});
    const auto at = first.read_position();
    CHECK(at.lines == 3);
    CHECK(at.offset == std::string("grow 2\nleave 0\ngrow 1\n").size());
    // The next reader applies nothing read before, the line being written once it ends, and
    // numbers lines on from the first's.
    weft::run::control_file next(file.string(), at);
    CHECK(next.poll().empty());
    control_append(file, " 1\nbad\n");
    CHECK(next.poll() == std::vector<control_command>{control_command::leave({1})});
    CHECK(next.rejected() == 1);
    CHECK(next.lines() == 5);
    std::filesystem::remove_all(dir);
}
