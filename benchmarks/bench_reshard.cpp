// Online layout switches (engine.reconfigure) against the two things they replace or are
// bounded by, measured in one run, in nccl-tests' habit of printing a figure next to its
// bound:
//   - checkpoint-restart: saving a checkpoint in the old layout, then building an engine in
//     the new layout and loading it (goal: the switch is at least 20x faster);
//   - the memory-copy bound: the plan's bytes over this machine's measured shared-memory MPI
//     bandwidth, plus its local copies over the measured memcpy bandwidth (goal: within 3x).
// Each transition runs at three training-state sizes (parameters plus AdamW moments of about
// 0.25, 0.5 and 1 GiB) to show how the time grows. Launch under mpirun with 4 ranks:
//   mpirun -np 4 --oversubscribe bench_reshard [--sizes 0.25,0.5,1] [--staging-mib 64]
//          [--scratch DIR] [--json FILE]
#include <mpi.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "weft/comm/mpi.hpp"
#include "weft/comm/mpi_environment.hpp"
#include "weft/core/error.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/exec/cpu_heap.hpp"
#include "weft/io/atomic_file.hpp"
#include "weft/models/gpt.hpp"
#include "weft/sched/gpipe.hpp"
#include "weft/sched/one_f_one_b.hpp"
#include "weft/shard/any_zero.hpp"
#include "weft/train/checkpoint.hpp"
#include "weft/train/engine.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using weft::comm::mpi;
using engine_t = weft::train::engine<weft::sched::any_of<weft::sched::one_f_one_b, weft::sched::gpipe>,
                                     weft::shard::any_zero, mpi, weft::exec::cpu, weft::models::gpt>;

struct options {
    std::vector<double> sizes{0.25, 0.5, 1.0};  // GiB of parameters + AdamW moments
    double staging_mib = 64;
    std::string scratch = "/tmp";
    std::string json;
};

// `text` as a number, whole: "0.5abc", "inf" and "nan" are refused by `flag`'s name.
double finite_number(const std::string& flag, const std::string& text) {
    double value = 0;
    const char* end = text.data() + text.size();
    const auto [at, code] = std::from_chars(text.data(), end, value);
    if (code != std::errc{} || at != end || !std::isfinite(value))
        throw weft::invalid_argument(flag, text, "must be a finite number");
    return value;
}

options parse(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        const auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw weft::invalid_argument(flag, "", "needs a value");
            return argv[++i];
        };
        if (flag == "--sizes") {
            o.sizes.clear();
            const std::string list = value();
            for (std::size_t at = 0; at <= list.size();) {
                const std::size_t comma = std::min(list.find(',', at), list.size());
                const double gib = finite_number("--sizes", list.substr(at, comma - at));
                weft::require(gib > 0 && gib <= 64, "--sizes", list, "must list sizes in GiB in (0, 64]");
                o.sizes.push_back(gib);
                at = comma + 1;
            }
        } else if (flag == "--staging-mib") {
            o.staging_mib = finite_number("--staging-mib", value());
            // The transfers stage at least one float at a time (engine::switch_layout's staging_bytes).
            weft::require(o.staging_mib * 1048576 >= sizeof(float), "--staging-mib", o.staging_mib,
                          "must be at least 4 bytes' worth (" + std::to_string(4.0 / 1048576) + " MiB)");
        } else if (flag == "--scratch") {
            o.scratch = value();
        } else if (flag == "--json") {
            o.json = value();
        } else {
            throw weft::invalid_argument("option", flag, "valid: --sizes, --staging-mib, --scratch, --json");
        }
    }
    return o;
}

// A GPT whose parameters plus AdamW moments (three floats each) come to about `gib`: width
// 1024, a byte vocabulary, and as many layers (at least 2) as the size takes.
weft::nn::gpt_config model_of(double gib) {
    weft::nn::gpt_config c{
        .num_layers = 2, .d_model = 1024, .num_heads = 16, .vocab_size = 256, .seq_len = 16, .seed = 1};
    const double per_layer = 12.0 * 1024 * 1024 * 3 * sizeof(float);
    c.num_layers = std::max(2, static_cast<int>(gib * (1u << 30) / per_layer + 0.5));
    return c;
}

weft::data::token_batch batch_of(const weft::nn::gpt_config& c, int rows) {
    weft::data::token_batch b{rows, c.seq_len, {}, {}};
    for (int i = 0; i < rows * c.seq_len; ++i) {
        b.inputs.push_back((i * 7 + 3) % c.vocab_size);
        b.targets.push_back((i * 5 + 1) % c.vocab_size);
    }
    return b;
}

weft::parallel_config layout(int pp, int dp, int tp, int zero, int world) {
    // One micro-batch per pipeline rank: the batch of 8 rows divides over every layout here.
    return weft::parallel_config({.pp = pp,
                                  .dp = dp,
                                  .tp = tp,
                                  .zero_stage = zero,
                                  .microbatches = pp,
                                  .schedule = pp > 1 ? weft::sched::one_f_one_b::kind : weft::sched::gpipe::kind,
                                  .world_size = world});
}

struct transition {
    const char* name;
    weft::parallel_config from, to;
};

// This machine's bandwidths: memcpy on one core, and MPI point-to-point between ranks 0 and 1
// (shared memory under one mpirun) while the others wait, both over 256 MiB buffers, best of
// three.
struct bandwidths {
    double memcpy_gbs = 0;
    double mpi_gbs = 0;
};

bandwidths measure(mpi& world) {
    constexpr std::size_t bytes = std::size_t{256} << 20;
    std::vector<char> a(bytes, 1), b(bytes, 2);
    bandwidths out;
    // memcpy on rank 0 alone (the others wait), as one copy of a switch runs on one core.
    world.barrier();
    if (world.rank() == 0)
        for (int i = 0; i < 3; ++i) {
            const auto t0 = clock_type::now();
            std::memcpy(b.data(), a.data(), bytes);
            const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
            out.memcpy_gbs = std::max(out.memcpy_gbs, bytes / s / 1e9);
        }
    world.broadcast(std::as_writable_bytes(std::span<double>(&out.memcpy_gbs, 1)), 0);
    for (int i = 0; i < 3; ++i) {
        world.barrier();
        const auto t0 = clock_type::now();
        if (world.rank() == 0) world.isend(std::as_bytes(std::span<const char>(a)), 1, 7).wait();
        if (world.rank() == 1) world.irecv(std::as_writable_bytes(std::span<char>(b)), 0, 7).wait();
        const double s = std::chrono::duration<double>(clock_type::now() - t0).count();
        double seconds[1] = {world.rank() == 1 ? s : 0.0};
        world.allreduce_sum(std::span<double>(seconds));
        out.mpi_gbs = std::max(out.mpi_gbs, bytes / seconds[0] / 1e9);
    }
    return out;
}

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

int run(int argc, char** argv) {
    weft::comm::mpi_environment environment(argc, argv);
    // As train_gpt does: freed buffers are reused rather than returned to the system and
    // page-faulted in again (a switch frees the old state as it fills the new).
    weft::exec::retain_freed_memory();
    auto world = mpi::world();
    const int rank = world.rank();
    try {
        const options o = parse(argc, argv);
        weft::require(world.size() == 4, "ranks", world.size(), "bench_reshard runs with 4 ranks (mpirun -np 4)");
        // Before the minutes of measuring, not after: rank 0 writes the figures.
        if (rank == 0 && !o.json.empty()) weft::io::require_writable(o.json, "--json");
        const bandwidths bw = measure(world);
        const double parallel_copies =
            std::min<double>(world.size(), std::max(1u, std::thread::hardware_concurrency()));
        const transition transitions[] = {
            {"pp4 -> pp2 x dp2", layout(4, 1, 1, 0, 4), layout(2, 2, 1, 0, 4)},
            {"dp4 zero1 -> zero3", layout(1, 4, 1, 1, 4), layout(1, 4, 1, 3, 4)},
            {"pp2 x tp2 -> tp4", layout(2, 1, 2, 0, 4), layout(1, 1, 4, 0, 4)},
            {"world 4 -> 2 (pp4 -> pp2)", layout(4, 1, 1, 0, 4), layout(2, 1, 1, 0, 2)},
        };
        if (rank == 0) {
            std::printf(
                "# weft bench_reshard: 4 ranks on %.0f core(s); memcpy %.2f GB/s (one core), MPI "
                "point-to-point %.2f GB/s; staging cap %.0f MiB\n",
                parallel_copies, bw.memcpy_gbs, bw.mpi_gbs, o.staging_mib);
            std::printf(
                "# switch: engine.reconfigure(); restart: save a checkpoint, build the new engine, load it; "
                "bound: moved / MPI bw + local / memcpy bw; peak: the most state plus staging a rank held, "
                "against its max(old, new) + 2 x cap\n");
            std::printf("# %-26s %9s %10s %10s %10s %8s %11s %8s %9s %7s %10s %11s\n", "transition", "state GiB",
                        "moved MiB", "bound MiB", "switch ms", "GB/s", "restart ms", "speedup", "bound ms", "ratio",
                        "peak MiB", "of bound");
        }
        nlohmann::json rows = nlohmann::json::array();
        // One directory for all ranks: only the checkpoint writer writes, every rank reads.
        const std::filesystem::path scratch = std::filesystem::path(o.scratch) / "weft_bench_reshard";
        if (rank == 0) std::filesystem::create_directories(scratch);
        world.barrier();
        for (const double gib : o.sizes) {
            const auto model = model_of(gib);
            const weft::train::engine_options engine_options{

                .batch_size = 8, .optimizer = {.kind = weft::optim::optimizer_kind::adamw, .lr = 1e-4}};
            const double state_gib = 3.0 * static_cast<double>(model.parameter_count()) * sizeof(float) / (1u << 30);
            for (const auto& t : transitions) {
                const std::filesystem::path checkpoint = scratch / "model.safetensors";
                double switch_s = 0, restart_s = 0;
                weft::elastic::switch_report report;
                {
                    engine_t engine(world, t.from, model, engine_options);
                    engine.step(batch_of(model, 8));  // the AdamW moments exist from here
                    world.barrier();
                    auto t0 = clock_type::now();
                    weft::train::save(engine, checkpoint);
                    world.barrier();
                    const double save_s = seconds_since(t0);
                    world.barrier();
                    report = engine.reconfigure(
                        t.to, {.partition = {}, .staging_bytes = static_cast<std::size_t>(o.staging_mib * 1048576)});
                    world.barrier();
                    switch_s = report.seconds;
                    // The old engine is gone before the restart builds the new one, as in a restart.
                    t0 = clock_type::now();
                    {
                        engine_t restarted(world, t.to, model, engine_options);
                        if (!restarted.is_spare()) weft::train::load(restarted, checkpoint);
                        world.barrier();
                    }
                    restart_s = save_s + seconds_since(t0);
                }
                // Local copies run on as many ranks at once as there are cores for them; the MPI
                // bandwidth was measured with the other ranks running, as in a switch.
                const double bound_s = report.bytes_moved / (bw.mpi_gbs * 1e9) +
                                       report.bytes_copied_locally / parallel_copies / (bw.memcpy_gbs * 1e9);
                if (rank == 0) {
                    std::printf("  %-26s %9.2f %10.1f %10.1f %10.1f %8.2f %11.1f %7.1fx %9.1f %6.2fx %10.1f %10.1f%s\n",
                                t.name,
                                state_gib, weft::elastic::switch_report::mib(report.bytes_moved),
                                weft::elastic::switch_report::mib(report.lower_bound_bytes), 1e3 * switch_s,
                                report.gigabytes_per_second(), 1e3 * restart_s, restart_s / switch_s, 1e3 * bound_s,
                                switch_s / bound_s, weft::elastic::switch_report::mib(report.memory_peak_bytes),
                                weft::elastic::switch_report::mib(report.memory_bound_bytes),
                                report.within_memory_bound ? "" : " over");
                    std::printf("  %-26s %9s phases ms: check %.1f | plan %.1f | move %.1f | build %.1f\n", "", "",
                                1e3 * report.check_seconds, 1e3 * report.plan_seconds, 1e3 * report.move_seconds,
                                1e3 * report.build_seconds);
                    std::fflush(stdout);
                    rows.push_back({{"transition", t.name},
                                    {"state_gib", state_gib},
                                    {"moved_bytes", report.bytes_moved},
                                    {"lower_bound_bytes", report.lower_bound_bytes},
                                    {"copied_bytes", report.bytes_copied_locally},
                                    {"switch_ms", 1e3 * switch_s},
                                    {"restart_ms", 1e3 * restart_s},
                                    {"bound_ms", 1e3 * bound_s},
                                    {"memory_peak_bytes", report.memory_peak_bytes},
                                    {"memory_bound_bytes", report.memory_bound_bytes},
                                    {"within_memory_bound", report.within_memory_bound}});
                }
            }
        }
        if (rank == 0) {
            std::filesystem::remove_all(scratch);
            if (!o.json.empty()) {
                // Whole or not at all: an earlier run's figures are not left half overwritten.
                const std::string text =
                    nlohmann::json{{"memcpy_gbs", bw.memcpy_gbs}, {"mpi_gbs", bw.mpi_gbs}, {"rows", rows}}.dump(2) + '\n';
                weft::io::write_file_atomically(o.json, std::as_bytes(std::span<const char>(text)));
            }
        }
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_reshard: rank %d: %s\n", rank, e.what());
        MPI_Abort(MPI_COMM_WORLD, 2);
        return 2;
    }
}

}  // namespace

int main(int argc, char** argv) {
    return run(argc, argv);
}
