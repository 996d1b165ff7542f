// Compute-only programs in torch.distributed.pipelining's CSV form (`_dump_csv` /
// `_load_csv`): one row per rank, one action per cell (`0F0`, `1I3`,
// `(0F7;7B3)OVERLAP_F_B`), an empty cell for an idle slot. PyTorch's files may also hold the
// stage-wide cells `0REDUCE_GRAD`, `0UNSHARD`, `0RESHARD`: read with csv_options::stage_wide,
// checked, and kept (compute_part() drops them for a caller that places its own).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/sched/action.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/shard_actions.hpp"

namespace weft::sched {

// How from_csv reads a file.
struct csv_options {
    // Accept the stage-wide cells REDUCE_GRAD, UNSHARD and RESHARD that PyTorch's schedules
    // hold (each stage at most one of each: REDUCE_GRAD after its last weight-gradient action,
    // UNSHARD before its first compute action, RESHARD after its last, the two as a pair).
    // Off: a compute-only program, as a generator returns it.
    bool stage_wide = false;
};

// One line per rank, cells separated by commas, each line ending in '\n'. Stage-wide actions
// (REDUCE_GRAD, UNSHARD, RESHARD) of a program that is not lowered are written as PyTorch
// writes them (`0REDUCE_GRAD`).
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
            if (is_comm(a.kind) || !is_known(a.kind))
                throw invalid_argument("to_csv: action on rank " + detail::int_text(static_cast<long long>(r)),
                                       to_string(a),
                                       "the CSV form holds compute actions only (F, B, I, W, OVERLAP_F_B) and the "
                                       "stage-wide REDUCE_GRAD, UNSHARD and RESHARD; comm actions come from lower()");
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

// Where each action of a rank came from: its column in the file (for messages).
struct csv_places {
    std::vector<std::vector<std::size_t>> columns;  // [rank][action index]
};

// The stage-wide cells of `p` (read from the file `places` describes): per stage at most one
// REDUCE_GRAD, after the stage's last weight-gradient action; at most one UNSHARD, before its
// first compute action, and one RESHARD, after its last, each with the other.
inline void check_csv_stage_wide(const program& p, const csv_places& places) {
    for (int s = 0; s < p.num_stages; ++s) {
        const int r = p.stage_rank[static_cast<std::size_t>(s)];
        const auto& actions = p.ranks[static_cast<std::size_t>(r)];
        const auto cell = [&](std::size_t i) {
            return csv_cell_name(static_cast<std::size_t>(r), places.columns[static_cast<std::size_t>(r)][i]);
        };
        std::size_t first_use = actions.size(), last_use = actions.size(), last_grads = actions.size();
        for (std::size_t i = 0; i < actions.size(); ++i) {
            if (uses_stage(actions[i], s)) {
                if (first_use == actions.size()) first_use = i;
                last_use = i;
            }
            if (makes_weight_grads(actions[i], s)) last_grads = i;
        }
        const std::string stage = "stage " + int_text(s);
        std::size_t seen[3] = {actions.size(), actions.size(), actions.size()};  // REDUCE_GRAD, UNSHARD, RESHARD
        for (std::size_t i = 0; i < actions.size(); ++i) {
            const action& a = actions[i];
            if (has_microbatch(a.kind) || a.stage != s) continue;
            const std::size_t k = a.kind == action_kind::REDUCE_GRAD ? 0 : a.kind == action_kind::UNSHARD ? 1 : 2;
            const std::string text = to_string(a);
            if (seen[k] != actions.size())
                throw invalid_argument(cell(i), text,
                                       stage + " already has one (" + cell(seen[k]) + "); each stage has at most one " +
                                           std::string(to_string(a.kind)));
            seen[k] = i;
            if (a.kind == action_kind::REDUCE_GRAD && last_grads != actions.size() && i < last_grads)
                throw invalid_argument(cell(i), text,
                                       "comes before " + to_string(actions[last_grads]) + " (" + cell(last_grads) +
                                           "), " + stage + "'s last weight-gradient action; REDUCE_GRAD goes after it");
            if (a.kind == action_kind::UNSHARD && first_use != actions.size() && i > first_use)
                throw invalid_argument(cell(i), text,
                                       "comes after " + to_string(actions[first_use]) + " (" + cell(first_use) +
                                           "), " + stage + "'s first compute action; UNSHARD goes before it");
            if (a.kind == action_kind::RESHARD && last_use != actions.size() && i < last_use)
                throw invalid_argument(cell(i), text,
                                       "comes before " + to_string(actions[last_use]) + " (" + cell(last_use) + "), " +
                                           stage + "'s last compute action; RESHARD goes after it");
        }
        if ((seen[1] == actions.size()) != (seen[2] == actions.size())) {
            const std::size_t alone = seen[1] != actions.size() ? seen[1] : seen[2];
            throw invalid_argument(cell(alone), to_string(actions[alone]),
                                   stage + (seen[1] != actions.size() ? " has no RESHARD" : " has no UNSHARD") +
                                       ": UNSHARD and RESHARD come as a pair, one before the stage's first compute "
                                       "action and one after its last");
        }
    }
}

}  // namespace detail

// Reads a compute-only program, inferring num_ranks (the rows), num_stages (highest stage
// + 1, with no stage missing), num_microbatches (highest micro-batch + 1) and stage_rank.
// Lines may end in "\n" or "\r\n"; a final newline does not start another rank. With
// options.stage_wide, REDUCE_GRAD, UNSHARD and RESHARD cells are read too, checked as
// csv_options says, and kept in place (compute_part() drops them).
[[nodiscard]] inline program from_csv(std::string_view text, const csv_options& options = {}) {
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
    detail::csv_places places;
    places.columns.resize(lines.size());
    bool any_stage_wide = false;
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
                const bool stage_wide = !has_microbatch(a.kind);
                if (stage_wide && !options.stage_wide)
                    throw invalid_argument(detail::csv_cell_name(line, column), cell,
                                           "the CSV form holds compute actions only (F, B, I, W, "
                                           "OVERLAP_F_B) here; read with csv_options{.stage_wide = true} to accept "
                                           "REDUCE_GRAD, UNSHARD and RESHARD");
                if (!is_compute(a.kind) && !stage_wide)
                    throw invalid_argument(detail::csv_cell_name(line, column), cell,
                                           "the CSV form holds compute actions only (F, B, I, W, "
                                           "OVERLAP_F_B)" +
                                               std::string(options.stage_wide
                                                               ? " and the stage-wide REDUCE_GRAD, UNSHARD, RESHARD"
                                                               : "") +
                                               "; comm actions come from lower()");
                any_stage_wide = any_stage_wide || stage_wide;
                detail::place_csv_stage(p.stage_rank, a.stage, rank, max_stages, cell, line, column);
                if (a.microbatch > max_microbatch) max_microbatch = a.microbatch;
                if (a.kind == action_kind::OVERLAP_F_B) {
                    detail::place_csv_stage(p.stage_rank, a.overlap_stage, rank, max_stages, cell, line, column);
                    if (a.overlap_microbatch > max_microbatch) max_microbatch = a.overlap_microbatch;
                }
                p.ranks[line].push_back(a);
                places.columns[line].push_back(column);
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
    if (any_stage_wide) detail::check_csv_stage_wide(p, places);
    return p;
}

// The compute actions of `p` (a program that is not lowered): its stage-wide REDUCE_GRAD,
// UNSHARD and RESHARD dropped, for a caller that places its own (lower() and
// add_shard_actions(), as weft's engine does).
[[nodiscard]] constexpr program compute_part(const program& p) {
    require(!p.lowered, "compute_part: program.lowered", "true",
            "pass a compute-only program (from_csv's or a generator's), not a lowered one");
    program out = p;
    for (auto& actions : out.ranks)
        std::erase_if(actions, [](const action& a) { return !has_microbatch(a.kind); });
    return out;
}

}  // namespace weft::sched
