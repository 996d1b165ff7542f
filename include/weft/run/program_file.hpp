// A pipeline program from a file: the CSV form that torch.distributed.pipelining writes and
// reads (sched/csv.hpp), for a run's --program (settings.program) and weft-schedule's --input,
// and --program checked against the run's layout and model before the first step.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>

#include "weft/core/error.hpp"
#include "weft/core/parallel_config.hpp"
#include "weft/run/settings.hpp"
#include "weft/sched/csv.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/validate.hpp"

namespace weft::run {

// A schedule's CSV is a few bytes per action: 64 MiB is far beyond any real one, and keeps a
// device (/dev/zero) or a wrong file from being read until memory runs out.
inline constexpr std::uintmax_t max_program_file_bytes = std::uintmax_t{64} << 20;

// The text of the file `path`, given as `option`: a weft::error naming both when there is
// none, it is not a regular file, it is larger than 64 MiB or it cannot be read.
[[nodiscard]] inline std::string read_program_text(const std::string& path, std::string_view option) {
    std::error_code error;
    if (!std::filesystem::exists(path, error))
        throw invalid_argument(option, path, "cannot open the file for reading: there is none");
    if (!std::filesystem::is_regular_file(path, error))
        throw invalid_argument(option, path, "must be a regular file (a schedule's CSV)");
    const std::uintmax_t bytes = std::filesystem::file_size(path, error);
    if (error || bytes > max_program_file_bytes)
        throw invalid_argument(option, path, "must be a CSV file of at most 64 MiB");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw invalid_argument(option, path, "cannot open the file for reading");
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) throw invalid_argument(option, path, "cannot be read to its end");
    return text.str();
}

// The program in the CSV file `path` (given as `option`), its stage-wide cells (REDUCE_GRAD,
// UNSHARD, RESHARD) kept, checked by sched::check (dependencies, counts, no deadlock): a
// weft::error naming the option, the file and the first problem.
[[nodiscard]] inline sched::program read_program_file(const std::string& path, std::string_view option) {
    const std::string text = read_program_text(path, option);
    sched::program p;
    try {
        p = sched::from_csv(text, {.stage_wide = true});
    } catch (const error& e) {
        throw invalid_argument(option, path, unprefixed(e));
    }
    if (const sched::validation v = sched::check(p); !v.ok)
        throw invalid_argument(option, path, "is not a valid program: " + v.message);
    return p;
}

// The options --program cannot go with, before any file is read: a layout switch builds the
// new layout's engine from its generated schedule, and an elastic run chooses its layouts as
// ranks come and go, so either would drop the program. (--schedule is refused by the command
// line, run/options.hpp: settings.schedule is not read when settings.program is given.)
inline void check_program_settings(const settings& s) {
    if (s.program.empty()) return;
    // The command line's --schedule excludes --program; a library caller that fills both gets
    // the same refusal (the default schedule reads as "not given").
    require(s.schedule == settings{}.schedule, "--schedule", s.schedule,
            "cannot be combined with --program " + s.program +
                ": the program is the schedule; give one or the other");
    require(s.switches.empty(), "--switch", s.switches.empty() ? std::string() : s.switches.front(),
            "cannot be combined with --program " + s.program +
                ": a switch generates the new layout's schedule and would drop the program; give one or the other");
    if (s.elastic)
        throw invalid_argument("--elastic", "given",
                               "cannot be combined with --program " + s.program +
                                   ": an elastic run chooses its layouts (and generates their schedules) as ranks "
                                   "come and go; give one or the other");
}

// settings.program read and checked against the run before the first step: its ranks (rows)
// must be --pp, its micro-batches --microbatches, every rank must hold the same number of
// stages (and --chunks, when given, that number), and the model must have a unit for every
// stage (`num_units`: its layers + 2). Returns the program as read (stage-wide cells kept).
[[nodiscard]] inline sched::program read_run_program(const settings& s, int num_units) {
    check_program_settings(s);
    const std::string option = "--program";
    sched::program p = read_program_file(s.program, option);
    const auto text = [](long long n) { return std::to_string(n); };
    require(p.num_ranks == s.pp, option, s.program,
            "holds " + text(p.num_ranks) + " rank(s) (one per line) but --pp is " + text(s.pp) +
                ": valid is a program of --pp ranks (write it for " + text(s.pp) + " ranks, or give --pp " +
                text(p.num_ranks) + ")");
    require(p.num_microbatches == s.microbatches, option, s.program,
            "holds " + text(p.num_microbatches) + " micro-batch(es) (0 .. " + text(p.num_microbatches - 1) +
                ") but --microbatches is " + text(s.microbatches) + ": valid is a program of --microbatches " +
                "micro-batches (give --microbatches " + text(p.num_microbatches) + ")");
    require(p.num_stages % p.num_ranks == 0, option, s.program,
            "holds " + text(p.num_stages) + " stages over " + text(p.num_ranks) +
                " ranks: valid is the same number of stages (chunks) on every rank, a multiple of " +
                text(p.num_ranks));
    const int chunks = p.num_stages / p.num_ranks;
    require(s.chunks == 0 || s.chunks == chunks, option, s.program,
            "holds " + text(chunks) + " chunk(s) per rank but --chunks is " + text(s.chunks) +
                ": leave --chunks out (the program gives it) or give --chunks " + text(chunks));
    require(p.num_stages <= num_units, option, s.program,
            "holds " + text(p.num_stages) + " stages but the model has " + text(num_units) +
                " units (layers + 2) to give them: valid is at most " + text(num_units) +
                " stages (use more --layers or a program of fewer chunks)");
    require(s.partition.empty() || s.partition.size() == static_cast<std::size_t>(p.num_stages), "--partition",
            text(static_cast<long long>(s.partition.size())) + " stage(s)",
            "must give one unit count per stage of --program " + s.program + " (" + text(p.num_stages) + ")");
    return p;
}

// The layout a run with `program` trains in: --pp, --dp, --tp and --zero with the program's
// chunks per rank, and no generated schedule (the program is the schedule).
[[nodiscard]] inline parallel_config program_config(const settings& s, const sched::program& program,
                                                    int world_size) {
    return parallel_config({.pp = s.pp, .dp = s.dp, .tp = s.tp, .zero_stage = s.zero,
                            .microbatches = s.microbatches, .chunks = program.num_stages / program.num_ranks,
                            .world_size = world_size});
}

}  // namespace weft::run
