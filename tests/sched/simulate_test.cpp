// simulate(): hand-computed timelines (non-unit and per-rank costs, T_comm > 0, chunks,
// overlapped pairs), lowered == compute-only timings, and errors for invalid input.
#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "test_programs.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/sched/lower.hpp"
#include "weft/sched/one_f_one_b.hpp"
#include "weft/sched/simulate.hpp"

namespace ws = weft::sched;
using enum ws::action_kind;

namespace {

// A program from text: ranks separated by '|', actions by spaces; stage s on rank s % ranks.
ws::program make(int stages, int microbatches, std::string_view text) {
    ws::program p = weft_test::program_from_text(microbatches, text);
    p.num_stages = stages;
    p.stage_rank.clear();
    for (int s = 0; s < stages; ++s) p.stage_rank.push_back(s % p.num_ranks);
    return p;
}

ws::cost_model costs(double forward, double backward_input, double backward_weight, double comm) {
    ws::cost_model c;
    c.uniform = {forward, backward_input, backward_weight};
    c.comm = comm;
    return c;
}

// "start-end" of every action of a rank, comm included, e.g. "0F0@0-1 0F1@1-2".
std::string times(const ws::simulation& s, int rank) {
    std::string text;
    for (const ws::timed_action& t : s.timeline[static_cast<std::size_t>(rank)]) {
        if (!text.empty()) text += ' ';
        const auto number = [](double v) {
            std::string n = std::to_string(v);
            n.erase(n.find_last_not_of('0') + 1);
            if (n.back() == '.') n.pop_back();
            return n;
        };
        text += ws::to_string(t.what) + "@" + number(t.start) + "-" + number(t.end);
        CHECK(t.rank == rank);
    }
    return text;
}

// The compute actions of every rank with their times, in program order.
std::vector<std::vector<ws::timed_action>> compute_only(const ws::simulation& s) {
    std::vector<std::vector<ws::timed_action>> out;
    for (const auto& rank : s.timeline) {
        out.emplace_back();
        for (const auto& t : rank)
            if (ws::is_compute(t.what.kind)) out.back().push_back(t);
    }
    return out;
}

}  // namespace

TEST_CASE("simulate: GPipe with T_F=1, T_B=2, T_W=1, T_comm=0.5", "[sched][simulate]") {
    const ws::simulation s = ws::simulate(ws::gpipe::generate(2, 2), costs(1, 2, 1, 0.5));
    // Rank 1 gets each activation 0.5 after rank 0 produced it; B costs T_B + T_W = 3.
    CHECK(times(s, 0) == "0F0@0-1 0F1@1-2 0B0@7-10 0B1@10-13");
    CHECK(times(s, 1) == "1F0@1.5-2.5 1F1@2.5-3.5 1B0@3.5-6.5 1B1@6.5-9.5");
    CHECK(s.makespan == 13);
    CHECK(s.busy == std::vector<double>{8, 8});
    CHECK(s.span == std::vector<double>{13, 8});
    CHECK(s.bubble_rate == Approx(5.0 / 13.0));
    CHECK(s.peak_activations == std::vector<double>{2, 2});
}

TEST_CASE("simulate: 1F1B with per-rank costs and T_comm=1", "[sched][simulate]") {
    ws::cost_model c;
    c.per_rank = {{1, 1, 1}, {2, 2, 1}};
    c.comm = 1;
    const ws::program p = ws::one_f_one_b::generate(2, 3);
    const ws::simulation s = ws::simulate(p, c);
    CHECK(times(s, 0) == "0F0@0-1 0F1@1-2 0B0@8-10 0F2@10-11 0B1@13-15 0B2@18-20");
    CHECK(times(s, 1) == "1F0@2-4 1B0@4-7 1F1@7-9 1B1@9-12 1F2@12-14 1B2@14-17");
    CHECK(s.makespan == 20);
    CHECK(s.busy == std::vector<double>{9, 15});
    CHECK(s.span == std::vector<double>{20, 15});
    // The longest span is rank 0's: its own busy time counts, not rank 1's.
    CHECK(s.bubble_rate == Approx(11.0 / 20.0));
    CHECK(s.peak_activations == std::vector<double>{2, 1});

    SECTION("the lowered program has the same compute timings, and its SEND/RECV times") {
        const ws::simulation l = ws::simulate(ws::lower(p), c);
        CHECK(compute_only(l) == compute_only(s));
        CHECK(times(l, 1).starts_with("1RECV_F0@2-2 1F0@2-4 1B0@4-7 1SEND_B0@7-7 1RECV_F1@7-7"));
        CHECK(times(l, 0).starts_with("0F0@0-1 0SEND_F0@1-1 0F1@1-2 0SEND_F1@2-2 0RECV_B0@8-8"));
        CHECK(l.makespan == s.makespan);
        CHECK(l.bubble_rate == s.bubble_rate);
        CHECK(l.peak_activations == s.peak_activations);
        CHECK(l.busy == s.busy);
        CHECK(l.span == s.span);
    }
}

TEST_CASE("simulate: looped chunks with split backward cost 1/v each", "[sched][simulate]") {
    // 4 stages on 2 ranks (v = 2): each chunk costs half its rank's T_F, T_B, T_W.
    const ws::program p = make(4, 1,
                               "0F0 2F0 2I0 0I0 2W0 0W0 | "
                               "1F0 3F0 3I0 1I0 3W0 1W0");
    const ws::simulation s = ws::simulate(p, costs(2, 2, 1, 0.25));
    CHECK(times(s, 0) == "0F0@0-1 2F0@2.5-3.5 2I0@6-7 0I0@8.5-9.5 2W0@9.5-10 0W0@10-10.5");
    CHECK(times(s, 1) == "1F0@1.25-2.25 3F0@3.75-4.75 3I0@4.75-5.75 1I0@7.25-8.25 "
                         "3W0@8.25-8.75 1W0@8.75-9.25");
    CHECK(s.makespan == 10.5);
    CHECK(s.busy == std::vector<double>{5, 5});
    CHECK(s.bubble_rate == Approx(5.5 / 10.5));
    // Two chunk micro-batches live at once = one micro-batch of the rank's whole share;
    // a split activation stays live until its W.
    CHECK(s.peak_activations == std::vector<double>{1, 1});
    CHECK(compute_only(ws::simulate(ws::lower(p), costs(2, 2, 1, 0.25))) == compute_only(s));
}

TEST_CASE("simulate: activations live until the W when the backward is split", "[sched][simulate]") {
    // One rank, one stage: the I frees nothing, so the second F makes two live.
    const ws::simulation s = ws::simulate(make(1, 2, "0F0 0I0 0F1 0W0 0I1 0W1"));
    CHECK(s.peak_activations == std::vector<double>{2});
    const ws::simulation full = ws::simulate(make(1, 2, "0F0 0B0 0F1 0B1"));
    CHECK(full.peak_activations == std::vector<double>{1});
    CHECK(full.bubble_rate == 0);
    CHECK(full.makespan == 6);
}

TEST_CASE("simulate: an OVERLAP_F_B costs the sum of its parts", "[sched][simulate]") {
    const ws::program p = make(2, 2, "0F0 0F1 0B0 0B1 | 1F0 (1F1;1B0)OVERLAP_F_B 1B1");
    const ws::simulation s = ws::simulate(p, costs(1, 1, 1, 0));
    CHECK(times(s, 1) == "1F0@1-2 (1F1;1B0)OVERLAP_F_B@2-5 1B1@5-7");
    CHECK(times(s, 0) == "0F0@0-1 0F1@1-2 0B0@5-7 0B1@7-9");
    CHECK(s.peak_activations == std::vector<double>{2, 2});
    CHECK(compute_only(ws::simulate(ws::lower(p))) == compute_only(s));
}

TEST_CASE("simulate: REDUCE_GRAD waits for every weight gradient of its stage", "[sched][simulate]") {
    const ws::simulation s = ws::simulate(make(1, 2, "0F0 0F1 0I0 0I1 0W1 0W0 0REDUCE_GRAD"));
    CHECK(times(s, 0) == "0F0@0-1 0F1@1-2 0I0@2-3 0I1@3-4 0W1@4-5 0W0@5-6 0REDUCE_GRAD@6-6");
}

TEST_CASE("simulate: lowered and compute-only programs agree under T_comm > 0", "[sched][simulate]") {
    for (int p = 1; p <= 5; ++p)
        for (int m = p; m <= p + 4; ++m)
            for (const ws::program& prog : {ws::gpipe::generate(p, m), ws::one_f_one_b::generate(p, m)}) {
                const ws::cost_model c = costs(1.5, 2.25, 0.75, 0.5);
                const ws::simulation a = ws::simulate(prog, c);
                const ws::simulation b = ws::simulate(ws::lower(prog), c);
                CHECK(compute_only(a) == compute_only(b));
                CHECK(a.makespan == b.makespan);
                CHECK(a.bubble_rate == b.bubble_rate);
            }
}

TEST_CASE("simulate: uniform costs give the closed forms of GPipe and 1F1B", "[sched][simulate]") {
    // Bubble (p-1)(T_F+T_B+T_W) for both; makespan (m+p-1)(T_F+T_B+T_W) with T_comm = 0.
    const ws::cost_model c = costs(1, 2, 3, 0);
    for (int p = 1; p <= 6; ++p)
        for (int m = p; m <= 2 * p + 1; ++m)
            for (const ws::program& prog : {ws::gpipe::generate(p, m), ws::one_f_one_b::generate(p, m)}) {
                const ws::simulation s = ws::simulate(prog, c);
                CHECK(s.makespan == 6.0 * (m + p - 1));
                CHECK(s.span[0] - s.busy[0] == 6.0 * (p - 1));
                CHECK(s.bubble_rate == Approx(static_cast<double>(p - 1) / (m + p - 1)));
            }
}

TEST_CASE("simulate runs in constant evaluation", "[sched][simulate]") {
    static_assert(ws::simulate(ws::gpipe::generate(2, 2)).makespan == 9.0);
    static_assert(ws::simulate(ws::one_f_one_b::generate(3, 4)).peak_activations[0] == 3.0);
    STATIC_REQUIRE(ws::simulate(ws::lower(ws::one_f_one_b::generate(4, 8))).makespan == 33.0);
}

TEST_CASE("simulate rejects invalid programs and costs", "[sched][simulate]") {
    using Catch::Matchers::Contains;
    // The message is check()'s, behind what failed.
    const ws::program missing_backward = make(1, 1, "0F0");
    CHECK_THROWS_AS(ws::simulate(missing_backward), weft::error);
    CHECK_THROWS_WITH(ws::simulate(missing_backward),
                      Contains("simulate: the program is invalid") &&
                          Contains(ws::check(missing_backward).message));
    const ws::program deadlock = make(2, 1, "0B0 0F0 | 1F0 1B0");
    CHECK_THROWS_WITH(ws::simulate(deadlock), Contains("simulate: the program is invalid"));
    CHECK_THROWS_WITH(ws::simulate(ws::program{}), Contains("num_ranks"));

    const ws::program ok = ws::gpipe::generate(2, 2);
    CHECK_THROWS_WITH(ws::simulate(ok, costs(0, 1, 1, 0)), Contains("T_F"));
    CHECK_THROWS_WITH(ws::simulate(ok, costs(1, -1, 1, 0)), Contains("T_B"));
    CHECK_THROWS_WITH(ws::simulate(ok, costs(1, 1, 1, -0.5)), Contains("T_comm"));
    ws::cost_model three_ranks;
    three_ranks.per_rank = {{}, {}, {}};
    CHECK_THROWS_WITH(ws::simulate(ok, three_ranks), Contains("per_rank"));
}
