// Must NOT compile: an engine over a backend that names itself, its scalar, its memory space,
// its matrices and its context (state memory, synchronize, copies) but has no kernels has to stop the build with one message, naming the
// first group of kernels it lacks. With -DWEFT_COMPILE_FAIL_CONTROL exec::cpu is used.
#include <cstddef>
#include <span>
#include <string_view>

#include "weft/comm/local.hpp"
#include "weft/core/memory_space.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/shard/replicate.hpp"
#include "weft/train/engine.hpp"

#ifdef WEFT_COMPILE_FAIL_CONTROL
using candidate = weft::exec::cpu;
#else
struct matrices_only {
    static constexpr std::string_view name = "matrices only";
    using scalar = float;
    using memory_space = weft::host_space;
    using matrix = weft::exec::cpu::matrix;
    int rows(const matrix& m) const { return static_cast<int>(m.rows()); }
    int cols(const matrix& m) const { return static_cast<int>(m.cols()); }
    const weft::state_memory& state_memory() const { return weft::host_state_memory(); }
    void synchronize() const {}
    void copy_to_host(const matrix&, std::span<float>) {}
    void copy_from_host(std::span<const float>, matrix&) {}
};
using candidate = matrices_only;
#endif

using engine_t = weft::engine<weft::sched::gpipe, weft::shard::replicate, weft::comm::local, candidate>;

std::size_t weft_compile_fail_probe() { return sizeof(engine_t); }
