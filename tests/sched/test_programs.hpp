// Programs the sched tests build: one written out as text, and every schedule at one size.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "weft/core/schedule_kind.hpp"
#include "weft/sched/action.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/schedule.hpp"

namespace weft_test {

// A program from text: ranks separated by '|', actions (in parse_action's form, comm
// actions included) by spaces; one stage per rank, stage s on rank s. Callers that need
// more stages or another placement set num_stages and stage_rank afterwards. constexpr,
// so static_assert can check what validate() says of it (from_csv is not, and has no
// place for comm actions).
constexpr weft::sched::program program_from_text(int microbatches, std::string_view text) {
    weft::sched::program p;
    p.num_microbatches = microbatches;
    p.ranks.emplace_back();
    std::size_t begin = 0;
    for (std::size_t at = 0; at <= text.size(); ++at) {
        const bool end = at == text.size() || text[at] == ' ' || text[at] == '|';
        if (!end) continue;
        if (at > begin) p.ranks.back().push_back(weft::sched::parse_action(text.substr(begin, at - begin)));
        if (at < text.size() && text[at] == '|') p.ranks.emplace_back();
        begin = at + 1;
    }
    p.num_ranks = static_cast<int>(p.ranks.size());
    p.num_stages = p.num_ranks;
    for (int r = 0; r < p.num_ranks; ++r) p.stage_rank.push_back(r);
    return p;
}

struct generated_schedule {
    std::string name;
    weft::sched::program program;
};

// Every schedule at p = 4, m = 8 and its default chunk count.
inline std::vector<generated_schedule> every_schedule() {
    std::vector<generated_schedule> out;
    for (const auto& [kind, name] : weft::schedule_names) {
        const weft::sched::schedule_params params{
            .ranks = 4, .microbatches = 8, .chunks = weft::default_chunks(kind)};
        out.push_back({std::string(name), weft::sched::generate(kind, params)});
    }
    return out;
}

}  // namespace weft_test
