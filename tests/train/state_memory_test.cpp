// The engine keeps its training state in its backend's state memory (core/state_memory.hpp)
// and waits for the backend's queued work before the host touches that state: a backend
// whose memory and waits are counted shows where the engine's buffers went: those made at
// construction, the optimizer's moments (filled at its first step) and a layout switch's; and a
// switch has the memory give back what it keeps for reuse.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "training_run.hpp"
#include "weft/core/state_memory.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/shard/any_zero.hpp"

namespace {

struct counted_memory {
    static inline std::size_t live_bytes = 0;
    static inline int allocations = 0;
    static inline int copies = 0;
    static inline int trims = 0;
    static void* allocate(std::size_t bytes) {
        ++allocations;
        live_bytes += bytes;
        return std::calloc(bytes, 1);
    }
    static void deallocate(void* p, std::size_t bytes) noexcept {
        live_bytes -= bytes;
        std::free(p);
    }
    static void copy(void* to, const void* from, std::size_t bytes) {
        ++copies;
        std::memcpy(to, from, bytes);
    }
    static void give_back_kept() noexcept { ++trims; }
};
const weft::state_memory counted{.name = "counted",
                                 .allocate = &counted_memory::allocate,
                                 .deallocate = &counted_memory::deallocate,
                                 .pages_releasable = false,
                                 .copy = &counted_memory::copy,
                                 .give_back_kept = &counted_memory::give_back_kept};

// exec::cpu, with its state in `counted` memory and its waits counted: what a GPU backend
// looks like to the engine.
struct counting_backend : weft::exec::cpu {
    int* waits = nullptr;
    [[nodiscard]] const weft::state_memory& state_memory() const { return counted; }
    void synchronize() const { ++*waits; }
};
static_assert(weft::compute_backend<counting_backend>);

template <class T>
const weft::state_memory& memory_of(const weft::state_vector<T>& v) {
    return v.get_allocator().memory();
}

}  // namespace

TEST_CASE("the engine's training state lives in its backend's state memory", "[train][state_memory]") {
    // One schedule keeps this engine's instantiation small; the ZeRO stage is a run-time choice.
    using engine_t = weft::train::engine<weft::sched::gpipe, weft::shard::any_zero, weft::comm::local, counting_backend>;
    weft::comm::local::run(1, [](weft::comm::local& world) {
        int waits = 0;
        counting_backend backend;
        backend.waits = &waits;
        const int allocations_before = counted_memory::allocations;
        {
            auto options = weft_test::test_options();
            options.optimizer.kind = weft::optim::optimizer_kind::adamw;
            engine_t engine(world,
                            weft::parallel_config({.pp = 1, .microbatches = 2, .schedule = weft::sched::gpipe::kind,
                                                   .world_size = 1}),
                            weft_test::test_model(), options, backend);
            CHECK(&weft::current_state_memory() == &weft::host_state_memory());  // the scopes closed
            auto& tensors = engine.parts().state().stages.at(0).tensors.full;
            CHECK(&memory_of(tensors.parameter_storage()) == &counted);
            const int after_construction = counted_memory::allocations;
            CHECK(after_construction >= allocations_before + 2);  // parameters and gradients at least

            const weft::data::synthetic_dataset data(weft_test::test_model().input_dim,
                                                     weft_test::test_model().num_classes, 7);
            static_cast<void>(engine.step(data.batch(0, weft_test::batch_size)));
            CHECK(waits >= 1);  // before the optimizer read the gradients
            CHECK(counted_memory::allocations > after_construction);  // AdamW's moments

            // A layout switch makes the new layout's buffers there too, and has the memory give
            // back the old layout's buffers it kept for reuse (sizes the new one may not need).
            const int before_switch = counted_memory::allocations;
            const int trims_before = counted_memory::trims;
            CHECK(trims_before == 0);
            static_cast<void>(engine.reconfigure(weft::parallel_config(
                {.pp = 1, .zero_stage = 1, .microbatches = 4, .schedule = weft::sched::gpipe::kind, .world_size = 1})));
            CHECK(counted_memory::allocations > before_switch);
            CHECK(counted_memory::trims == 1);
            auto& switched = engine.parts().state().stages.at(0).tensors.full;
            CHECK(&memory_of(switched.parameter_storage()) == &counted);
            // ZeRO-1's gather sends this rank's updated range out of a copy made by the state
            // memory (a GPU's: on the device), not by the host.
            const int copies_before = counted_memory::copies;
            static_cast<void>(engine.step(data.batch(1, weft_test::batch_size)));
            CHECK(counted_memory::copies == copies_before + 1);
        }
        CHECK(counted_memory::live_bytes == 0);  // all of it given back where it came from
    });
}
