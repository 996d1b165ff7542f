// The CSV form of compute-only programs (torch.distributed.pipelining's _dump_csv/_load_csv).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "test_programs.hpp"
#include "weft/core/schedule_kind.hpp"
#include "weft/sched/csv.hpp"
#include "weft/sched/lower.hpp"
#include "weft/sched/one_f_one_b.hpp"
#include "weft/sched/schedule.hpp"
#include "weft/sched/simulate.hpp"
#include "weft/sched/validate.hpp"

namespace ws = weft::sched;
using ws::action_kind;

namespace {

using weft_test::every_schedule;

std::string error_of(const std::string& text) {
    try {
        (void)ws::from_csv(text);
    } catch (const weft::error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("to_csv writes one row per rank in PyTorch's text form") {
    CHECK(ws::to_csv(ws::one_f_one_b::generate(2, 3)) ==
          "0F0,0F1,0B0,0F2,0B1,0B2\n"
          "1F0,1B0,1F1,1B1,1F2,1B2\n");
    static_assert(ws::to_csv(ws::one_f_one_b::generate(1, 1)) == "0F0,0B0\n");
}

TEST_CASE("every schedule round-trips through CSV") {
    for (const auto& g : every_schedule()) {
        INFO(g.name);
        const std::string csv = ws::to_csv(g.program);
        const ws::program back = ws::from_csv(csv);
        CHECK(back == g.program);
        CHECK(ws::to_csv(back) == csv);
    }
}

TEST_CASE("an overlapped pair is one cell") {
    ws::program p = ws::from_csv("0F0,(0F1;0B0)OVERLAP_F_B,0B1\n");
    REQUIRE(p.ranks.size() == 1);
    REQUIRE(p.ranks[0].size() == 3);
    CHECK(p.ranks[0][1] == ws::overlap_f_b({action_kind::F, 0, 1}, {action_kind::B, 0, 0}));
    CHECK(p.num_microbatches == 2);
    CHECK(ws::to_csv(p) == "0F0,(0F1;0B0)OVERLAP_F_B,0B1\n");
    CHECK(ws::valid(p));
}

TEST_CASE("a hand-written CSV in PyTorch's style (idle cells, CRLF) reads, validates and simulates") {
    // ZB-H1-like split backward on 2 ranks with empty cells for idle slots, as csv.writer writes it.
    const std::string csv =
        "0F0,0F1,,0I0,0F2,0I1,0W0,0I2,0W1,0W2\r\n"
        ",1F0,1I0,1W0,1F1,1I1,1W1,1F2,1I2,1W2\r\n";
    const ws::program p = ws::from_csv(csv);
    CHECK(p.num_ranks == 2);
    CHECK(p.num_stages == 2);
    CHECK(p.num_microbatches == 3);
    CHECK(p.stage_rank == std::vector<int>{0, 1});
    CHECK(p.ranks[0].size() == 9);
    CHECK(p.ranks[1].size() == 9);
    CHECK_FALSE(p.lowered);
    const ws::validation v = ws::check(p);
    INFO(v.message);
    REQUIRE(v.ok);
    const ws::simulation sim = ws::simulate(p);
    CHECK(sim.makespan > 0);
    CHECK(sim.busy == std::vector<double>{9.0, 9.0});
    CHECK(ws::valid(ws::lower(p)));
}

TEST_CASE("a looped placement is inferred from the cells") {
    const ws::program p = ws::from_csv("0F0,2F0,2B0,0B0\n1F0,3F0,3B0,1B0\n");
    CHECK(p.num_stages == 4);
    CHECK(p.stage_rank == std::vector<int>{0, 1, 0, 1});
    CHECK(ws::valid(p));
}

TEST_CASE("bad CSV is rejected with the cell, its place and the reason") {
    const std::string bad_cell = error_of("0F0,0B0\n1F0,1X0\n");
    CHECK_THAT(bad_cell, Catch::Contains("line 2 (rank 1), column 2") && Catch::Contains("\"1X0\"") &&
                             Catch::Contains("not an action kind"));

    CHECK_THAT(error_of("0F0,1F0\n1B0,0B0\n"),
               Catch::Contains("line 2 (rank 1), column 1") && Catch::Contains("stage 1 already runs on rank 0"));

    CHECK_THAT(error_of("0F0,0B0\n2F0,2B0\n"), Catch::Contains("missing stage 1") && Catch::Contains("without gaps"));
    // A blank line names its line, not a rank count that does not add up.
    CHECK_THAT(error_of("0F0,0B0\n\r\n1F0,1B0\n"),
               Catch::Contains("csv line 2 (rank 1) = \"\r\" is invalid: is blank") &&
                   Catch::Contains("remove the line"));

    CHECK_THAT(error_of("0F0,0SEND_F0,0B0\n"),
               Catch::Contains("column 2") && Catch::Contains("0SEND_F0") && Catch::Contains("compute actions only"));
    // Compute-only unless asked: a stage-wide cell names the option that reads it.
    CHECK_THAT(error_of("0F0,0B0,0REDUCE_GRAD\n"),
               Catch::Contains("compute actions only") && Catch::Contains("stage_wide = true"));

    CHECK_THAT(error_of(""), Catch::Contains("one line per rank"));
    CHECK_THAT(error_of(",,\n"), Catch::Contains("at least one action"));
    // A huge stage number is a gap, refused before any table of that size is built.
    CHECK_THAT(error_of("0F0,999999999F0\n"), Catch::Contains("without gaps"));
    CHECK_THAT(error_of("0F0,(0F1;0X0)OVERLAP_F_B\n"), Catch::Contains("column 2"));
}

TEST_CASE("to_csv rejects lowered programs and comm actions") {
    const ws::program lowered = ws::lower(ws::one_f_one_b::generate(2, 2));
    CHECK_THROWS_WITH(ws::to_csv(lowered), Catch::Contains("lowered") && Catch::Contains("compute-only"));
    ws::program sneaky = ws::one_f_one_b::generate(2, 2);
    sneaky.ranks[0].push_back({action_kind::SEND_F, 0, 0});
    CHECK_THROWS_WITH(ws::to_csv(sneaky), Catch::Contains("0SEND_F0") && Catch::Contains("compute actions only"));
}

namespace {

// 1F1B on 2 ranks and 2 micro-batches with the stage-wide cells PyTorch's schedules hold
// (_add_unshard_reshard, _add_reduce_grad): UNSHARD first, REDUCE_GRAD and RESHARD last.
const std::string stage_wide_1f1b =
    "0UNSHARD,0F0,0F1,0B0,0B1,0REDUCE_GRAD,0RESHARD\n"
    "1UNSHARD,1F0,1B0,1F1,1B1,1REDUCE_GRAD,1RESHARD\n";

std::string stage_wide_error_of(const std::string& text) {
    try {
        (void)ws::from_csv(text, {.stage_wide = true});
    } catch (const weft::error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("csv stage-wide cells: read, kept in place, valid, and dropped by compute_part") {
    const ws::program p = ws::from_csv(stage_wide_1f1b, {.stage_wide = true});
    CHECK(p.num_ranks == 2);
    CHECK(p.num_stages == 2);
    CHECK(p.num_microbatches == 2);
    REQUIRE(p.ranks[0].size() == 7);
    CHECK(p.ranks[0].front() == ws::action{action_kind::UNSHARD, 0, -1});
    CHECK(p.ranks[0][5] == ws::action{action_kind::REDUCE_GRAD, 0, -1});
    CHECK(p.ranks[1].back() == ws::action{action_kind::RESHARD, 1, -1});
    const ws::validation v = ws::check(p);
    INFO(v.message);
    CHECK(v.ok);
    CHECK(ws::simulate(p).makespan == ws::simulate(ws::compute_part(p)).makespan);
    // Written back as read; the compute part is the generator's program, which lowers as today.
    CHECK(ws::to_csv(p) == stage_wide_1f1b);
    const ws::program compute = ws::compute_part(p);
    CHECK(compute == ws::one_f_one_b::generate(2, 2));
    CHECK(ws::valid(ws::lower(compute)));
    CHECK_THROWS_WITH(ws::compute_part(ws::lower(compute)), Catch::Contains("compute_part: program.lowered"));
}

TEST_CASE("csv stage-wide cells: REDUCE_GRAD alone, after split backwards and overlapped pairs") {
    // ZB-H1-like I/W split: the reduction follows the last W of its stage.
    const ws::program zb = ws::from_csv("0F0,0F1,0I0,0I1,0W0,0W1,0REDUCE_GRAD\n1F0,1I0,1F1,1I1,1W0,1W1,1REDUCE_GRAD\n",
                                        {.stage_wide = true});
    CHECK(ws::valid(zb));
    // A pair's backward half makes weight gradients of its stage.
    const ws::program pair =
        ws::from_csv("0F0,(0F1;0B0)OVERLAP_F_B,0B1,0REDUCE_GRAD\n", {.stage_wide = true});
    CHECK(ws::valid(pair));
    // A stage without any stage-wide cell beside one with them is accepted (at most one each).
    CHECK(ws::valid(ws::from_csv("0F0,0B0,0REDUCE_GRAD\n1F0,1B0\n", {.stage_wide = true})));
}

TEST_CASE("csv stage-wide cells out of place are refused with the cell and the rule") {
    CHECK_THAT(stage_wide_error_of("0F0,0F1,0B0,0REDUCE_GRAD,0B1\n"),
               Catch::Contains("line 1 (rank 0), column 4") && Catch::Contains("\"0REDUCE_GRAD\"") &&
                   Catch::Contains("comes before 0B1 (csv cell at line 1 (rank 0), column 5)") &&
                   Catch::Contains("REDUCE_GRAD goes after it"));
    CHECK_THAT(stage_wide_error_of("0F0,0I0,0REDUCE_GRAD,0W0\n"), Catch::Contains("comes before 0W0"));
    CHECK_THAT(stage_wide_error_of("0F0,0B0,0REDUCE_GRAD,0REDUCE_GRAD\n"),
               Catch::Contains("column 4") && Catch::Contains("already has one (csv cell at line 1 (rank 0), column 3)") &&
                   Catch::Contains("at most one REDUCE_GRAD"));
    CHECK_THAT(stage_wide_error_of("0F0,0UNSHARD,0B0,0RESHARD\n"),
               Catch::Contains("\"0UNSHARD\"") && Catch::Contains("comes after 0F0") &&
                   Catch::Contains("UNSHARD goes before it"));
    CHECK_THAT(stage_wide_error_of("0UNSHARD,0F0,0RESHARD,0B0\n"),
               Catch::Contains("\"0RESHARD\"") && Catch::Contains("comes before 0B0") &&
                   Catch::Contains("RESHARD goes after it"));
    CHECK_THAT(stage_wide_error_of("0UNSHARD,0F0,0B0\n"),
               Catch::Contains("\"0UNSHARD\"") && Catch::Contains("stage 0 has no RESHARD") &&
                   Catch::Contains("come as a pair"));
    CHECK_THAT(stage_wide_error_of("0F0,0B0,0RESHARD\n"), Catch::Contains("stage 0 has no UNSHARD"));
    // On the rank of its stage, as every action is.
    CHECK_THAT(stage_wide_error_of("0F0,0B0,1REDUCE_GRAD\n1F0,1B0\n"),
               Catch::Contains("line 2 (rank 1), column 1") && Catch::Contains("stage 1 already runs on rank 0"));
    // A microbatch on a stage-wide kind, and comm cells, stay refused.
    CHECK_THAT(stage_wide_error_of("0F0,0B0,0REDUCE_GRAD0\n"), Catch::Contains("takes no microbatch"));
    CHECK_THAT(stage_wide_error_of("0F0,0SEND_F0,0B0\n"),
               Catch::Contains("0SEND_F0") && Catch::Contains("comm actions come from lower()"));
}
