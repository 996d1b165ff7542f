// An engine over a device communicator paired with a host one (comm::with_host): the
// protocols that send host memory point to point, a checkpoint's gather to its writer and a
// layout switch's moves, go through comm::host_side, and the run steps, saves, switches and
// loads bit for bit as over the host communicator alone. The device side is posting_order
// (NCCL's matching, no tags) refusing those protocols' tags, as comm::nccl refuses host
// memory in sends and receives; the pipeline's activations stay on it.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "elastic_layouts.hpp"
#include "posting_order_comm.hpp"
#include "rendezvous_comm.hpp"
#include "scratch_dir.hpp"
#include "weft/comm/host_side.hpp"
#include "weft/comm/local.hpp"
#include "weft/comm/with_host.hpp"
#include "weft/elastic/transfer.hpp"
#include "weft/train/checkpoint.hpp"

namespace {

using weft::comm::local;
using namespace weft_test::elastic;
using device_model = weft_test::posting_order<local>;
using paired = weft::comm::with_host<device_model, local>;

static_assert(weft::communicator<paired>);
static_assert(weft::comm::matching_of<paired> == weft::comm::message_matching::in_posting_order);
// A device communicator that batches sends and receives (comm::nccl) keeps its flush(),
// which the pipeline launches each message with; one that does not, has none.
template <class C>
concept flushable = requires(C& c) { c.flush(); };
static_assert(flushable<weft::comm::with_host<weft_test::rendezvous<local>, local>>);
static_assert(!flushable<paired>);

device_model refusing_host_protocols(local inner) {
    return device_model(std::move(inner), {weft::train::detail::checkpoint_tag, weft::elastic::switch_tag});
}

struct rank_end {
    std::vector<double> losses;     // every step this rank trained in the layout
    std::vector<float> parameters;  // its stages' parameters at the end
};

// Two steps in `from`, a checkpoint, a switch to `to`, two steps, then the checkpoint loaded
// into `to` and one more step: every host protocol the engine has, between steps.
template <class Comm>
rank_end save_switch_and_load(Comm& world, const named_layout& from, const named_layout& to,
                              const std::filesystem::path& saved) {
    auto o = options();
    o.partition = from.partition;
    gpt_engine<Comm> engine(world, from.config(), model(), o);
    rank_end end;
    long long step = 0;
    const auto train = [&](int steps) {
        for (int i = 0; i < steps; ++i, ++step)
            if (!engine.is_spare()) end.losses.push_back(engine.step(batch(step)).loss);
    };
    train(2);
    weft::train::save(engine, saved);
    static_cast<void>(engine.reconfigure(to.config(), {.partition = to.partition}));
    train(2);
    if (!engine.is_spare()) weft::train::load(engine, saved);
    train(1);
    if (!engine.is_spare())
        engine.parts().with_full_parameters([&](int, const auto& stage) {
            const auto p = stage.parameters();
            end.parameters.insert(end.parameters.end(), p.begin(), p.end());
        });
    return end;
}

}  // namespace

TEST_CASE("host_side is the paired host communicator, or the communicator itself", "[elastic][with_host]") {
    // Checked on the main thread: Catch's assertions are not thread-safe.
    std::vector<int> seen(2 * 5, -1);
    local::run(2, [&](local& world) {
        paired both(device_model(world.split(0, world.rank())), world.split(0, world.rank()));
        // Splits keep both sides, over the same ranks.
        paired alone = both.split(world.rank(), 0);
        const auto r = static_cast<std::size_t>(5 * world.rank());
        seen[r] = &weft::comm::host_side(both) == &both.host() ? 1 : 0;
        seen[r + 1] = &weft::comm::host_side(world) == &world ? 1 : 0;
        seen[r + 2] = alone.size();
        seen[r + 3] = alone.host().size();
        seen[r + 4] = alone.device().size();
    });
    CHECK(seen == std::vector<int>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
}

TEST_CASE("with_host refuses a host communicator over other ranks", "[elastic][with_host]") {
    // Each rank's host side a group of its own: the sizes differ.
    CHECK_THROWS_WITH(local::run(2,
                                 [](local& world) {
                                     local host = world.split(world.rank(), 0);
                                     paired both(device_model(world.split(0, world.rank())), std::move(host));
                                 }),
                      Catch::Contains("host communicator size") && Catch::Contains("must equal"));
    // The same ranks in the reverse order: rank r is 1 - r.
    CHECK_THROWS_WITH(local::run(2,
                                 [](local& world) {
                                     local reversed = world.split(0, -world.rank());
                                     paired both(device_model(world.split(0, world.rank())), std::move(reversed));
                                 }),
                      Catch::Contains("host communicator rank"));
}

TEST_CASE("checkpoints and layout switches over a device communicator go through its host side",
          "[elastic][with_host]") {
    const auto layouts = world4_layouts();
    // A pipeline (its checkpoint gathers stages point to point) to ZeRO-3 replicas, replicas
    // to a V-shaped pipeline, and a ZeRO-3 pipeline to 2 ranks with spares.
    const std::pair<int, int> pairs[] = {{0, 6}, {3, 12}, {10, 13}};
    for (const auto& [a, b] : pairs) {
        const auto& from = layouts[static_cast<std::size_t>(a)];
        const auto& to = layouts[static_cast<std::size_t>(b)];
        INFO(from.name << " -> " << to.name);
        const weft_test::scratch_dir dir("with_host");
        std::vector<rank_end> reference(4), over_device(4);
        local::run(4, [&](local& world) {
            reference[static_cast<std::size_t>(world.rank())] =
                save_switch_and_load(world, from, to, dir.path / "reference.safetensors");
        });
        local::run(4, [&](local& world) {
            paired both(refusing_host_protocols(world.split(0, world.rank())), world.split(0, world.rank()));
            over_device[static_cast<std::size_t>(world.rank())] =
                save_switch_and_load(both, from, to, dir.path / "paired.safetensors");
        });
        for (std::size_t r = 0; r < reference.size(); ++r) {
            INFO("rank " << r);
            CHECK(over_device[r].losses.size() == reference[r].losses.size());
            CHECK(over_device[r].losses == reference[r].losses);
            CHECK(over_device[r].parameters == reference[r].parameters);
        }
    }
    // Without a host side the same run sends a checkpoint's host memory on the device
    // communicator, which refuses it.
    const weft_test::scratch_dir dir("with_host_refused");
    CHECK_THROWS_WITH(local::run(4,
                                 [&](local& world) {
                                     auto device = refusing_host_protocols(world.split(0, world.rank()));
                                     static_cast<void>(save_switch_and_load(device, layouts[0], layouts[6],
                                                                            dir.path / "refused.safetensors"));
                                 }),
                      Catch::Contains("belongs on comm::host_side"));
}
