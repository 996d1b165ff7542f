// Programs the sched tests build: one written out as text, and every schedule at one size.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "weft/core/type_list.hpp"
#include "weft/sched/action.hpp"
#include "weft/sched/program.hpp"
#include "weft/sched/schedule_list.hpp"

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
    weft::for_each_type(weft::sched::schedule_list{}, [&out]<class S>(std::type_identity<S>) {
        const weft::sched::schedule_params params{
            .ranks = 4, .microbatches = 8, .chunks = S::kind.default_chunks()};
        out.push_back({std::string(S::name), S::generate(params)});
    });
    return out;
}

}  // namespace weft_test
