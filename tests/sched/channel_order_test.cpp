// check_channel_order(): every shipped schedule can run over a communicator without tags
// (NCCL) once each route (sender, receiver, direction) has its own channel, and a program whose receives come in
// another order than the sends is named, with both actions. one_channel_per_route(): every
// route gets a channel that carries no other route of its ranks.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "weft/sched/channel_order.hpp"
#include "weft/sched/message_channels.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/sched/lower.hpp"
#include "weft/sched/one_f_one_b.hpp"
#include "weft/sched/schedule_list.hpp"
#include "weft/sched/validate.hpp"

namespace ws = weft::sched;

namespace {

// Whether, between some pair of ranks, the messages of both directions together are
// received in another order than they are sent: what one channel per pair would get wrong.
bool both_directions_out_of_order(const ws::program& p) {
    using enum ws::action_kind;
    // (sender, receiver) -> (forward?, receiving stage, micro-batch) in posting order.
    std::map<std::pair<int, int>, std::vector<std::tuple<bool, int, int>>> sends, recvs;
    const auto rank_of = [&p](int stage) { return p.stage_rank[static_cast<std::size_t>(stage)]; };
    for (int r = 0; r < p.num_ranks; ++r)
        for (const auto& a : p.ranks[static_cast<std::size_t>(r)]) {
            if (a.kind == SEND_F) sends[{r, rank_of(a.stage + 1)}].emplace_back(true, a.stage + 1, a.microbatch);
            if (a.kind == SEND_B) sends[{r, rank_of(a.stage - 1)}].emplace_back(false, a.stage - 1, a.microbatch);
            if (a.kind == RECV_F) recvs[{rank_of(a.stage - 1), r}].emplace_back(true, a.stage, a.microbatch);
            if (a.kind == RECV_B) recvs[{rank_of(a.stage + 1), r}].emplace_back(false, a.stage, a.microbatch);
        }
    return sends != recvs;
}

// fn(lowered program, "p P m M v V: ") for every layout of schedule S over p 1..6, m 1..16,
// v 1..3 that meets its preconditions.
template <class S, class Fn>
void for_each_layout(Fn&& fn) {
    for (int p = 1; p <= 6; ++p)
        for (int m = 1; m <= 16; ++m)
            for (int v = 1; v <= 3; ++v) {
                ws::program generated;
                try {
                    generated = S::generate({.ranks = p, .microbatches = m, .chunks = v});
                } catch (const weft::error&) {
                    continue;  // sizes outside this schedule's preconditions
                }
                fn(ws::lower(generated),
                   "p " + std::to_string(p) + " m " + std::to_string(m) + " v " + std::to_string(v) + ": ");
            }
}

}  // namespace

TEST_CASE("every shipped schedule keeps each direction's messages in order", "[sched][channel_order]") {
    weft::for_each_type(ws::schedule_list{}, []<class S>(std::type_identity<S>) {
        int checked = 0, interleaving_directions = 0;
        std::string failures;
        for_each_layout<S>([&](const ws::program& lowered, const std::string& where) {
            ++checked;
            if (const auto order = ws::check_channel_order(lowered); !order.ok)
                failures += where + order.message + "\n";
            if (both_directions_out_of_order(lowered)) ++interleaving_directions;
        });
        INFO(S::name << ": " << checked << " layouts, " << interleaving_directions
                     << " whose two directions interleave differently on the two sides");
        CHECK(checked > 0);
        CHECK(failures.empty());
        // Why one channel per pair of ranks is not enough: these schedules would swap messages.
        if (S::name == std::string_view("interleaved") || S::name == std::string_view("zbv") ||
            S::name == std::string_view("dualpipev"))
            CHECK(interleaving_directions > 0);
    });
}

TEST_CASE("receives posted in another order than the sends are named", "[sched][channel_order]") {
    using enum ws::action_kind;
    // GPipe over two ranks, except that rank 1 takes micro-batch 1 first: valid with tags (a
    // receive picks its message by tag), wrong without them.
    ws::program p = ws::gpipe::generate(2, 2);
    p.ranks[1] = {{F, 1, 1}, {F, 1, 0}, {B, 1, 0}, {B, 1, 1}};
    REQUIRE(ws::valid(p));
    const auto lowered = ws::lower(p);
    REQUIRE(ws::valid(lowered));
    const auto order = ws::check_channel_order(lowered);
    CHECK_FALSE(order.ok);
    CHECK(order.message ==
          "on the forward channel from rank 0 to rank 1, the 1st send is rank 0, index 1 (0SEND_F0) but the 1st "
          "receive is rank 1, index 0 (1RECV_F1); a communicator without tags (NCCL) would deliver one's data to "
          "the other");

    CHECK_FALSE(ws::check_channel_order(p).ok);  // compute-only: nothing to check yet
    CHECK(ws::check_channel_order(p).message == "check_channel_order needs a lowered program (sched::lower)");
    CHECK(ws::check_channel_order(ws::lower(ws::gpipe::generate(2, 2))).ok);
}

// one_channel_per_route(): over a communicator whose sends wait for their receives on one
// stream per rank (NCCL), each route needs a stream of its own at both ends. Every route of
// every shipped schedule gets a channel, and no channel carries two routes of one rank.
TEST_CASE("every route of every shipped schedule has a channel of its own at each of its ranks",
          "[sched][channel_order]") {
    weft::for_each_type(ws::schedule_list{}, []<class S>(std::type_identity<S>) {
        int most_channels = 0;
        std::string failures;
        for_each_layout<S>([&](const ws::program& lowered, const std::string& where) {
            const auto routes = ws::routes_of(lowered);
            const auto channels = ws::one_channel_per_route(lowered);
            std::map<std::pair<int, int>, int> routes_at;  // (channel, rank) -> routes
            for (const auto& route : routes) {
                const int c = channels.of(route);
                if (c < 0 || c >= channels.count) failures += where + "channel out of range\n";
                ++routes_at[{c, route.sender}];
                ++routes_at[{c, route.receiver}];
            }
            for (const auto& [at, n] : routes_at)
                if (n > 1)
                    failures += where + "channel " + std::to_string(at.first) + " carries " + std::to_string(n) +
                                " routes of rank " + std::to_string(at.second) + "\n";
            if (lowered.num_ranks == 1 && channels.count != 1) failures += where + "one rank needs one channel\n";
            most_channels = std::max(most_channels, channels.count);
        });
        INFO(S::name << ": at most " << most_channels << " channels");
        CHECK(failures.empty());
        CHECK(most_channels >= 2);  // a pipeline's routes share ranks
        CHECK(most_channels <= 8);  // a rank has at most 8 routes: 2 neighbours x 2 ways x 2 directions
    });
    // A linear pipeline: rank r's four routes (activations in and out, gradients in and out).
    const auto one_f_one_b = ws::lower(ws::generate(weft::sched::one_f_one_b::kind, {.ranks = 4, .microbatches = 8}));
    CHECK(ws::routes_of(one_f_one_b).size() == 6);
    CHECK(ws::one_channel_per_route(one_f_one_b).count <= 4);
}
