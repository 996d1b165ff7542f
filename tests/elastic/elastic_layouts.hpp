// What the layout-switching tests share: a GPT small enough to switch hundreds of times, its
// batches, and the layouts they switch between, at world 4 (every ZeRO stage, tp 2 and 4,
// pp 4 with 2 chunks, a V-shaped schedule, uneven partitions, a world of 2 with spares) and
// at world 8.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "weft/exec/cpu.hpp"
#include "weft/models/gpt.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/sched/interleaved.hpp"
#include "weft/sched/one_f_one_b.hpp"
#include "weft/sched/zb_h1.hpp"
#include "weft/sched/zbv.hpp"
#include "weft/shard/any_zero.hpp"
#include "weft/train/engine.hpp"

namespace weft_test::elastic {

using schedules = weft::sched::any_of<weft::sched::one_f_one_b, weft::sched::zb_h1, weft::sched::interleaved,
                                      weft::sched::zbv, weft::sched::gpipe>;
template <class Comm>
using gpt_engine = weft::train::engine<schedules, weft::shard::any_zero, Comm, weft::exec::cpu, weft::models::gpt>;

constexpr int batch_rows = 8;

inline weft::nn::gpt_config model() {
    // 6 layers: 8 units, enough for pp 4 with 2 chunks; 4 heads for tp 4; a vocabulary tp 4
    // splits unevenly.
    return {.num_layers = 6, .d_model = 16, .num_heads = 4, .vocab_size = 26, .seq_len = 4, .seed = 11};
}

// A larger GPT (about 0.7 M parameters) for the memory bound: a switch's memory moves page by
// page, and a buffer of model()'s few pages holds up to a page more than its data at each
// edge, which is more than a small staging cap leaves room for.
inline weft::nn::gpt_config paged_model() {
    auto m = model();
    m.d_model = 96;
    return m;
}

inline weft::train::engine_options options() {
    return {.batch_size = batch_rows,
            .optimizer = {.kind = weft::optim::optimizer_kind::adamw, .lr = 1e-2, .weight_decay = 0.1}};
}

inline weft::data::token_batch batch(long long step) {
    weft::data::token_batch b{batch_rows, model().seq_len, {}, {}};
    for (int i = 0; i < batch_rows * model().seq_len; ++i) {
        b.inputs.push_back(static_cast<int>((i * 5 + step * 7 + i / 3) % model().vocab_size));
        b.targets.push_back(static_cast<int>((i * 3 + step + 2) % model().vocab_size));
    }
    return b;
}

struct named_layout {
    std::string name;
    weft::parallel_options options;
    std::vector<int> partition;
    [[nodiscard]] weft::parallel_config config() const { return weft::parallel_config(options); }
};

inline named_layout make(std::string name, int pp, int dp, int tp, int zero, weft::schedule_kind schedule,
                         int chunks = 1, std::vector<int> partition = {}, int world = 0) {
    // As many micro-batches as the pipeline wants (2 per rank), of at least one row each.
    const int microbatches = std::min(2 * pp, batch_rows / dp);
    return {std::move(name),
            {.pp = pp,
             .dp = dp,
             .tp = tp,
             .zero_stage = zero,
             .microbatches = microbatches,
             .chunks = chunks,
             .schedule = schedule,
             .world_size = world == 0 ? pp * dp * tp : world},
            std::move(partition)};
}

// The layouts every ordered pair of which is switched between, at world 4.
inline std::vector<named_layout> world4_layouts() {
    using namespace weft::sched;
    return {
        make("pp4", 4, 1, 1, 0, one_f_one_b::kind),
        make("pp4 chunks2", 4, 1, 1, 0, interleaved::kind, 2),
        make("pp2 dp2 zero1", 2, 2, 1, 1, one_f_one_b::kind),
        make("dp4", 1, 4, 1, 0, gpipe::kind),
        make("dp4 zero1", 1, 4, 1, 1, gpipe::kind),
        make("dp4 zero2", 1, 4, 1, 2, gpipe::kind),
        make("dp4 zero3", 1, 4, 1, 3, gpipe::kind),
        make("tp4", 1, 1, 4, 0, gpipe::kind),
        make("pp2 tp2", 2, 1, 2, 0, zb_h1::kind),
        make("dp2 tp2 zero3", 1, 2, 2, 3, gpipe::kind),
        make("pp2 dp2 zero3 partition 3,5", 2, 2, 1, 3, one_f_one_b::kind, 1, {3, 5}),
        make("pp4 partition 1,3,2,2", 4, 1, 1, 0, zb_h1::kind, 1, {1, 3, 2, 2}),
        make("pp2 zbv dp2 zero2", 2, 2, 1, 2, zbv::kind, 2),
        make("pp2 world2", 2, 1, 1, 0, one_f_one_b::kind, 1, {}, 2),
    };
}

// A closed walk over the complete directed graph on n nodes that takes every edge (every
// ordered pair) exactly once (Hierholzer's algorithm): one engine switches through all pairs.
inline std::vector<int> every_ordered_pair_walk(int n) {
    std::vector<std::vector<int>> next(static_cast<std::size_t>(n));
    for (int a = 0; a < n; ++a)
        for (int b = n - 1; b >= 0; --b)
            if (a != b) next[static_cast<std::size_t>(a)].push_back(b);
    std::vector<int> stack{0}, walk;
    while (!stack.empty()) {
        auto& out = next[static_cast<std::size_t>(stack.back())];
        if (out.empty()) {
            walk.push_back(stack.back());
            stack.pop_back();
        } else {
            stack.push_back(out.back());
            out.pop_back();
        }
    }
    std::reverse(walk.begin(), walk.end());
    return walk;
}

// A sample of layouts at world 8: every ordered pair of these is switched between on threads.
inline std::vector<named_layout> world8_layouts() {
    using namespace weft::sched;
    return {
        make("pp8", 8, 1, 1, 0, one_f_one_b::kind),
        make("dp8 zero3", 1, 8, 1, 3, gpipe::kind),
        make("pp2 dp2 tp2 zero1", 2, 2, 2, 1, one_f_one_b::kind),
        make("pp4 dp2 zero2", 4, 2, 1, 2, zb_h1::kind),
        make("dp4 tp2 zero3", 1, 4, 2, 3, gpipe::kind),
        make("pp2 dp4 zero3 partition 5,3", 2, 4, 1, 3, one_f_one_b::kind, 1, {5, 3}),
        make("pp4 world4", 4, 1, 1, 0, interleaved::kind, 2, {}, 4),
    };
}

}  // namespace weft_test::elastic
