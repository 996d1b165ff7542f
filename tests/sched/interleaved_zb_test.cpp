// interleaved-zb: PyTorch 2.15's ScheduleInterleavedZeroBubble order action by action (the
// fixtures in tests/sched/reference, written by torch_interleaved_zb.py there), the sizes PyTorch
// rejects, and validity for every size it accepts in the property range.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "program_checks.hpp"
#include "weft/core/error.hpp"
#include "weft/sched/csv.hpp"
#include "weft/sched/interleaved_zb.hpp"
#include "weft/sched/validate.hpp"

namespace ws = weft::sched;

namespace {

constexpr ws::program interleaved_zb_program(int ranks, int microbatches, int chunks) {
    return ws::interleaved_zb::generate({.ranks = ranks, .microbatches = microbatches, .chunks = chunks});
}

std::string read_reference(const std::string& file) {
    std::ifstream in(std::string(WEFT_SCHED_REFERENCE_DIR) + "/" + file);
    REQUIRE(in.good());
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

}  // namespace

static_assert(ws::interleaved_zb::name == "interleaved-zb");
static_assert(ws::valid(ws::lower(interleaved_zb_program(4, 8, 2))));
static_assert(ws::valid(interleaved_zb_program(2, 6, 3)));

TEST_CASE("interleaved-zb reproduces PyTorch's ScheduleInterleavedZeroBubble order", "[sched][interleaved_zb]") {
    struct size {
        int p, m, v;
    };
    for (const size s : {size{2, 4, 2}, size{4, 8, 2}, size{2, 6, 3}, size{4, 12, 2}, size{4, 3, 2}, size{4, 10, 2}}) {
        const std::string file = "interleaved_zb_p" + std::to_string(s.p) + "_m" + std::to_string(s.m) + "_v" +
                                 std::to_string(s.v) + ".csv";
        INFO(file);
        const ws::program torch = ws::from_csv(read_reference(file));
        const ws::program weft = interleaved_zb_program(s.p, s.m, s.v);
        REQUIRE(torch.ranks.size() == weft.ranks.size());
        for (std::size_t r = 0; r < weft.ranks.size(); ++r) {
            INFO("rank " << r);
            REQUIRE(torch.ranks[r].size() == weft.ranks[r].size());
            for (std::size_t k = 0; k < weft.ranks[r].size(); ++k) {
                INFO("action " << k);
                CHECK(ws::to_string(weft.ranks[r][k]) == ws::to_string(torch.ranks[r][k]));
            }
        }
        CHECK(torch.stage_rank == weft.stage_rank);  // looped: stage s on rank s mod p
        CHECK(ws::to_csv(weft) == read_reference(file));
    }
}

TEST_CASE("interleaved-zb is valid for every size PyTorch accepts", "[sched][interleaved_zb]") {
    for (int p = 1; p <= 8; ++p)
        for (int v = 1; v <= 4; ++v)
            for (int m = 1; m <= 32; ++m) {
                const int rounds = m / p > 1 ? m / p : 1;
                if (m % rounds != 0) {
                    CHECK_THROWS_AS(interleaved_zb_program(p, m, v), weft::error);
                    continue;
                }
                weft_test::check_program(interleaved_zb_program(p, m, v), p, m, v, weft_test::backward_form::split,
                                         [p](int stage) { return stage % p; });
            }
}

TEST_CASE("interleaved-zb rejects what PyTorch rejects, naming the parameter", "[sched][interleaved_zb]") {
    using Catch::Contains;
    // 7 micro-batches on 3 ranks: 2 rounds of 3.5.
    CHECK_THROWS_WITH(interleaved_zb_program(3, 7, 2),
                      Contains("microbatches = 7 is invalid") && Contains("= 2 rounds of equal size") &&
                          Contains("e.g. 6 or 8"));
    CHECK_THROWS_WITH(interleaved_zb_program(4, 8, 0), Contains("chunks = 0 is invalid"));
    CHECK_THROWS_WITH(interleaved_zb_program(0, 8, 2), Contains("ranks = 0 is invalid"));
    CHECK_THROWS_WITH(interleaved_zb_program(4, 0, 2), Contains("microbatches = 0 is invalid"));
    CHECK_NOTHROW(interleaved_zb_program(4, 3, 2));   // fewer than ranks: one round
    CHECK_NOTHROW(interleaved_zb_program(4, 10, 2));  // 2 rounds of 5
}
