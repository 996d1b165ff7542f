// Compute-only programs in torch.distributed.pipelining's CSV form (`_dump_csv` /
// `_load_csv`): one row per rank, one action per cell (`0F0`, `1I3`,
// `(0F7;7B3)OVERLAP_F_B`), an empty cell for an idle slot.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/sched/action.hpp"
#include "weft/sched/program.hpp"

namespace weft::sched {

// One line per rank, cells separated by commas, each line ending in '\n'.
[[nodiscard]] constexpr std::string to_csv(const program& p) {
    // The CSV form has no place for comm actions; writing a lowered program would lose
    // nothing visibly but produce a file PyTorch's compute-only loader misreads.
    if (p.lowered)
        throw error(
            "to_csv: the program is lowered (lowered = true); the CSV form holds "
            "compute-only programs: pass the program the generator returned");
    std::string text;
    for (std::size_t r = 0; r < p.ranks.size(); ++r) {
        bool first = true;
        for (const action& a : p.ranks[r]) {
            if (!is_compute(a.kind))
                throw invalid_argument("to_csv: action on rank " + detail::int_text(static_cast<long long>(r)),
                                       to_string(a),
                                       "the CSV form holds compute actions only (F, B, I, W, OVERLAP_F_B)");
            if (!first) text.push_back(',');
            first = false;
            text.append(to_string(a));
        }
        text.push_back('\n');
    }
    return text;
}

namespace detail {

[[nodiscard]] constexpr bool is_csv_space(char c) {
    return c == ' ' || c == '\t' || c == '\r';
}

[[nodiscard]] constexpr std::string_view trim_csv_cell(std::string_view cell) {
    while (!cell.empty() && is_csv_space(cell.front())) cell.remove_prefix(1);
    while (!cell.empty() && is_csv_space(cell.back())) cell.remove_suffix(1);
    // Python's csv writer quotes only cells holding a comma, quote or newline, which no
    // action does; a quoted action is still accepted.
    if (cell.size() >= 2 && cell.front() == '"' && cell.back() == '"') cell = cell.substr(1, cell.size() - 2);
    return cell;
}

[[nodiscard]] constexpr std::string csv_cell_name(std::size_t line, std::size_t column) {
    return "csv cell at line " + int_text(static_cast<long long>(line + 1)) + " (rank " +
           int_text(static_cast<long long>(line)) + "), column " + int_text(static_cast<long long>(column + 1));
}

// Drops the "weft: " prefix so a nested message reads as one sentence.
[[nodiscard]] inline std::string without_error_prefix(std::string_view message) {
    constexpr std::string_view prefix = "weft: ";
    if (message.substr(0, prefix.size()) == prefix) message.remove_prefix(prefix.size());
    return std::string(message);
}

// Records that `stage` runs on `rank`, rejecting a stage seen on another rank.
// `max_stages` bounds the table: a file with n cells names at most 2n stages (an
// OVERLAP_F_B names two), so a higher stage number leaves a gap and is rejected here,
// before a typo like "999999999F0" allocates a huge table.
constexpr void place_csv_stage(std::vector<int>& stage_rank, int stage, int rank, std::size_t max_stages,
                               std::string_view cell, std::size_t line, std::size_t column) {
    if (static_cast<std::size_t>(stage) >= max_stages)
        throw invalid_argument(csv_cell_name(line, column), cell,
                               "stage " + int_text(stage) +
                                   " is higher than the number of stages the file can "
                                   "hold (" +
                                   int_text(static_cast<long long>(max_stages)) +
                                   "); stages must be numbered from 0 without gaps");
    if (static_cast<std::size_t>(stage) >= stage_rank.size())
        stage_rank.resize(static_cast<std::size_t>(stage) + 1, -1);
    int& owner = stage_rank[static_cast<std::size_t>(stage)];
    if (owner >= 0 && owner != rank)
        throw invalid_argument(csv_cell_name(line, column), cell,
                               "stage " + int_text(stage) + " already runs on rank " + int_text(owner) +
                                   "; every stage must run on exactly one rank");
    owner = rank;
}

}  // namespace detail

// Reads a compute-only program, inferring num_ranks (the rows), num_stages (highest stage
// + 1, with no stage missing), num_microbatches (highest micro-batch + 1) and stage_rank.
// Lines may end in "\n" or "\r\n"; a final newline does not start another rank.
[[nodiscard]] inline program from_csv(std::string_view text) {
    std::vector<std::string_view> lines;
    while (!text.empty()) {
        const std::size_t end = text.find('\n');
        lines.push_back(text.substr(0, end));
        text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    }
    if (lines.empty()) throw invalid_argument("csv", "", "expected one line per rank, e.g. \"0F0,0F1,0B0,0B1\"");

    std::size_t cells = lines.size();
    for (const std::string_view line : lines)
        for (const char c : line) cells += c == ',' ? 1 : 0;
    const std::size_t max_stages = 2 * cells;

    program p;
    p.num_ranks = static_cast<int>(lines.size());
    p.ranks.resize(lines.size());
    int max_microbatch = -1;
    for (std::size_t line = 0; line < lines.size(); ++line) {
        std::string_view rest = lines[line];
        const int rank = static_cast<int>(line);
        // A blank line is a rank with no actions, which no schedule has: most likely a stray
        // empty line, so say where it is instead of a rank count that does not add up.
        if (detail::trim_csv_cell(rest).empty() && rest.find(',') == std::string_view::npos)
            throw invalid_argument("csv line " + detail::int_text(static_cast<long long>(line + 1)) + " (rank " +
                                       detail::int_text(static_cast<long long>(line)) + ")",
                                   std::string(rest),
                                   "is blank: each line holds one rank's actions, so it would be a rank with none; "
                                   "remove the line");
        for (std::size_t column = 0;; ++column) {
            const std::size_t comma = rest.find(',');
            const std::string_view cell = detail::trim_csv_cell(rest.substr(0, comma));
            if (!cell.empty()) {
                action a;
                try {
                    a = parse_action(cell);
                } catch (const error& e) {
                    throw invalid_argument(detail::csv_cell_name(line, column), cell,
                                           detail::without_error_prefix(e.what()));
                }
                if (!is_compute(a.kind))
                    throw invalid_argument(detail::csv_cell_name(line, column), cell,
                                           "the CSV form holds compute actions only (F, B, I, W, "
                                           "OVERLAP_F_B); comm and stage-wide actions come from lower()");
                detail::place_csv_stage(p.stage_rank, a.stage, rank, max_stages, cell, line, column);
                if (a.microbatch > max_microbatch) max_microbatch = a.microbatch;
                if (a.kind == action_kind::OVERLAP_F_B) {
                    detail::place_csv_stage(p.stage_rank, a.overlap_stage, rank, max_stages, cell, line, column);
                    if (a.overlap_microbatch > max_microbatch) max_microbatch = a.overlap_microbatch;
                }
                p.ranks[line].push_back(a);
            }
            if (comma == std::string_view::npos) break;
            rest.remove_prefix(comma + 1);
        }
    }
    if (p.stage_rank.empty())
        throw invalid_argument("csv", "(no actions)", "expected at least one action, e.g. \"0F0\"");
    for (std::size_t s = 0; s < p.stage_rank.size(); ++s)
        if (p.stage_rank[s] < 0)
            throw invalid_argument("csv stages", "missing stage " + detail::int_text(static_cast<long long>(s)),
                                   "stages must be numbered 0 .. " +
                                       detail::int_text(static_cast<long long>(p.stage_rank.size()) - 1) +
                                       " without gaps (highest stage seen: " +
                                       detail::int_text(static_cast<long long>(p.stage_rank.size()) - 1) + ")");
    p.num_stages = static_cast<int>(p.stage_rank.size());
    p.num_microbatches = max_microbatch + 1;
    return p;
}

}  // namespace weft::sched
