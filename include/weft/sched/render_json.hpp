// A program as JSON: its sizes, the stage -> rank map and, per rank, the actions in their
// PyTorch text form. For tools that want the whole program in one machine-readable object.
#pragma once

#include <cstddef>
#include <string>

#include "weft/core/json_text.hpp"
#include "weft/sched/action.hpp"
#include "weft/sched/program.hpp"

namespace weft::sched {

// {"num_ranks":2,"num_stages":2,"num_microbatches":2,"lowered":false,"stage_rank":[0,1],
//  "ranks":[["0F0","0F1","0B0","0B1"],["1F0","1B0","1F1","1B1"]]}, one rank per line.
[[nodiscard]] inline std::string render_json(const program& p) {
    std::string out = "{\"num_ranks\":" + std::to_string(p.num_ranks) +
                      ",\"num_stages\":" + std::to_string(p.num_stages) +
                      ",\"num_microbatches\":" + std::to_string(p.num_microbatches) +
                      ",\"lowered\":" + (p.lowered ? "true" : "false") + ",\"stage_rank\":[";
    for (std::size_t s = 0; s < p.stage_rank.size(); ++s) out += (s == 0 ? "" : ",") + std::to_string(p.stage_rank[s]);
    out += "],\"ranks\":[";
    for (std::size_t r = 0; r < p.ranks.size(); ++r) {
        out += r == 0 ? "\n[" : ",\n[";
        for (std::size_t i = 0; i < p.ranks[r].size(); ++i)
            out += (i == 0 ? "" : ",") + weft::detail::json_string(to_string(p.ranks[r][i]));
        out += "]";
    }
    out += "\n]}\n";
    return out;
}

}  // namespace weft::sched
