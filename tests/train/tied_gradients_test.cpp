// tied_gradients: every copy of a tied tensor ends with the sum of all copies' gradients,
// whether the copies sit on one rank (two stages) or on several; stages without a copy are
// left alone, and only stages holding a shared copy defer their reduction.
#include <catch2/catch.hpp>

#include <map>
#include <mutex>
#include <vector>

#include "stream_ordered.hpp"
#include "weft/comm/local.hpp"
#include "weft/nn/flat_parameters.hpp"
#include "weft/train/tied_gradients.hpp"

namespace {

using weft::comm::local;

// A stage's tensors: "wte" (the tied one) on stages 0 and 3 (and 2 where `tied_on_2`), "w<s>"
// on every stage, gradients filled with stage-distinct values.
weft::nn::flat_parameters<float> stage_tensors(int s, bool tied_on_2 = false) {
    weft::parameter_registry registry;
    registry.add("w" + std::to_string(s), {2});
    if (s == 0 || s == 3 || (tied_on_2 && s == 2)) registry.add("wte", {3});
    weft::nn::flat_parameters<float> t(std::move(registry));
    auto g = t.gradients();
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = float(10 * (s + 1) + int(i));
    return t;
}

struct outcome {
    std::map<int, std::vector<float>> gradients;  // by stage
    std::map<int, bool> defers;
};

// Four stages over `ranks` pipeline ranks (stage s on rank s % ranks: a V-free round robin).
std::map<int, outcome> run(int ranks) {
    const std::vector<weft::nn::unit_range> units{{0, 1}, {1, 2}, {2, 3}, {3, 4}};
    std::vector<int> stage_rank;
    for (int s = 0; s < 4; ++s) stage_rank.push_back(s % ranks);
    const std::vector<weft::models::tied_parameter> tied{{"wte", {0, 3}}};
    std::map<int, outcome> out;
    std::mutex lock;
    local::run(ranks, [&](local& pipeline) {
        std::map<int, weft::nn::flat_parameters<float>> mine;
        for (int s = 0; s < 4; ++s)
            if (stage_rank[std::size_t(s)] == pipeline.rank()) mine.emplace(s, stage_tensors(s));
        weft::train::tied_gradients<float, local> ties(tied, units, stage_rank, pipeline);
        ties.sum([&](int s) -> weft::nn::flat_parameters<float>& { return mine.at(s); });
        const std::lock_guard guard(lock);
        for (auto& [s, t] : mine) {
            out[pipeline.rank()].gradients[s].assign(t.gradients().begin(), t.gradients().end());
            out[pipeline.rank()].defers[s] = ties.holds(s);
        }
    });
    return out;
}

}  // namespace

TEST_CASE("tied copies on one rank or on several end with the sum of all copies", "[train][tied]") {
    // Stage 0's gradients are 10, 11 (w0) then 12, 13, 14 (wte); stage 3's 40, 41 then 42, 43, 44.
    const std::vector<float> stage0{10, 11, 12 + 42, 13 + 43, 14 + 44};
    const std::vector<float> stage3{40, 41, 12 + 42, 13 + 43, 14 + 44};
    for (const int ranks : {1, 2, 4}) {
        INFO(ranks << " pipeline ranks");
        const auto result = run(ranks);
        const auto& first = result.at(0);
        const auto& last = result.at(3 % ranks);
        CHECK(first.gradients.at(0) == stage0);
        CHECK(last.gradients.at(3) == stage3);
        CHECK(first.defers.at(0));
        CHECK(last.defers.at(3));
        // Stages without a copy keep their own gradients and reduce at once.
        const auto& second = result.at(1 % ranks);
        CHECK(second.gradients.at(1) == std::vector<float>{20, 21});
        CHECK_FALSE(second.defers.at(1));
    }
}

TEST_CASE("a tied sum over a stream-ordered communicator is complete on the host before it is copied",
          "[train][tied]") {
    // As over comm::nccl: the state in device memory, and the sum's wait() ordering only the
    // compute stream (stream_ordered.hpp). Rank 0 holds two copies (stages 0 and 2), which
    // take the summed first copy on the host's word; rank 1 holds one (stage 3), summed in place.
    using ordered = weft_test::stream_ordered<local>;
    const std::vector<weft::nn::unit_range> units{{0, 1}, {1, 2}, {2, 3}, {3, 4}};
    const std::vector<int> stage_rank{0, 1, 0, 1};
    const std::vector<weft::models::tied_parameter> tied{{"wte", {0, 2, 3}}};
    std::map<int, std::vector<float>> wte;  // by stage
    std::mutex lock;
    local::run(2, [&](local& world) {
        ordered pipeline(world.split(0, world.rank()));
        const weft::state_memory_scope device(weft_test::stream_model::device_state_memory());
        std::map<int, weft::nn::flat_parameters<float>> mine;
        for (int s = 0; s < 4; ++s)
            if (stage_rank[std::size_t(s)] == pipeline.rank()) mine.emplace(s, stage_tensors(s, true));
        weft::train::tied_gradients<float, ordered> ties(tied, units, stage_rank, pipeline);
        ties.sum([&](int s) -> weft::nn::flat_parameters<float>& { return mine.at(s); });
        weft_test::stream_model::drain();  // what the engine's next kernel or synchronize() does
        const std::lock_guard guard(lock);
        for (auto& [s, t] : mine) {
            if (s == 1) continue;  // no copy
            const auto& info = t.registry().find("wte");
            wte[s].assign(t.gradients().begin() + info.offset, t.gradients().begin() + info.offset + 3);
        }
    });
    // wte's gradients: 12, 13, 14 on stage 0; 32, 33, 34 on stage 2; 42, 43, 44 on stage 3.
    const std::vector<float> sum{12 + 32 + 42, 13 + 33 + 43, 14 + 34 + 44};
    for (const int s : {0, 2, 3}) {
        INFO("stage " << s);
        CHECK(wte.at(s) == sum);
    }
    CHECK(weft_test::stream_model::writes_into_freed_memory() == 0);
}
