// Bandwidth of weft::comm::mpi's point-to-point and collectives, each next to the raw MPI call
// it wraps, measured in the same run, in nccl-tests' columns. Launch under mpirun:
//   mpirun -np 2 --oversubscribe bench_comm [--min-bytes 1K] [--max-bytes 256M] [--iters 20]
//          [--warmup 5] [--op all|sendrecv|allreduce|allgather|reduce_scatter] [--json FILE]
// Exit status 1 when any result differs from the expected one (#wrong != 0), 2 on errors.
// --inject-wrong corrupts one value of weft's results, so a test can check that this fails.
#include <mpi.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <limits>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "weft/comm/mpi.hpp"
#include "weft/comm/mpi_environment.hpp"
#include "weft/core/error.hpp"
#include "weft/io/atomic_file.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

struct options {
    std::size_t min_bytes = 1024;
    std::size_t max_bytes = std::size_t(256) << 20;
    int iters = 20;
    int warmup = 5;
    std::string op = "all";
    std::string json;
    bool inject_wrong = false;  // test hook: corrupts one value of weft's result on rank 0
};

// Above this size the iteration counts shrink in proportion, so that the default run over
// 1 KB .. 256 MB stays near a minute at 2 ranks on 2 cores; never below 3 timed iterations
// (or --iters, if smaller) and 1 warm-up.
constexpr std::size_t full_iteration_bytes = std::size_t(4) << 20;

int scaled(int count, std::size_t bytes, int floor) {
    if (bytes <= full_iteration_bytes) return count;
    const auto shrunk = static_cast<int>(static_cast<double>(count) * full_iteration_bytes / bytes);
    return std::max(std::min(count, floor), shrunk);
}

// "64K", "1M", "256M", "1G" or plain bytes, as nccl-tests' -b / -e take them.
std::size_t parse_bytes(const std::string& flag, const std::string& text) {
    char* end = nullptr;
    const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
    std::size_t scale = 1;
    const std::string suffix(end);
    if (suffix == "K" || suffix == "k") scale = std::size_t(1) << 10;
    else if (suffix == "M" || suffix == "m") scale = std::size_t(1) << 20;
    else if (suffix == "G" || suffix == "g") scale = std::size_t(1) << 30;
    else weft::require(suffix.empty(), flag, text, "must be a byte count, optionally with K, M or G");
    weft::require(end != text.c_str() && value >= 1 && value <= (std::size_t(1) << 40) / scale, flag, text,
                  "must be between 1 and 1T bytes");
    return static_cast<std::size_t>(value) * scale;
}

int parse_count(const std::string& flag, const std::string& text, int least) {
    char* end = nullptr;
    const long value = std::strtol(text.c_str(), &end, 10);
    weft::require(end != text.c_str() && *end == '\0' && value >= least && value <= 1000000, flag, text,
                  "must be an integer in [" + std::to_string(least) + ", 1000000]");
    return static_cast<int>(value);
}

options parse(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            weft::require(i + 1 < argc, a, "(missing)", "takes a value");
            return argv[++i];
        };
        if (a == "--min-bytes" || a == "-b") o.min_bytes = parse_bytes(a, value());
        else if (a == "--max-bytes" || a == "-e") o.max_bytes = parse_bytes(a, value());
        else if (a == "--iters" || a == "-n") o.iters = parse_count(a, value(), 1);
        else if (a == "--warmup" || a == "-w") o.warmup = parse_count(a, value(), 0);
        else if (a == "--op") o.op = value();
        else if (a == "--json") o.json = value();
        else if (a == "--inject-wrong") o.inject_wrong = true;
        else if (a == "--help" || a == "-h") {
            o.op = "help";
            return o;
        } else
            throw weft::invalid_argument("argument", a,
                                         "one of --min-bytes, --max-bytes, --iters, --warmup, --op, --json, --help");
    }
    weft::require(o.min_bytes >= sizeof(float), "--min-bytes", o.min_bytes, "must hold one float (>= 4)");
    weft::require(o.min_bytes <= o.max_bytes, "--min-bytes", o.min_bytes,
                  "must not exceed --max-bytes (" + std::to_string(o.max_bytes) + ")");
    weft::require(o.op == "all" || o.op == "sendrecv" || o.op == "allreduce" || o.op == "allgather" ||
                      o.op == "reduce_scatter",
                  "--op", o.op, "must be all, sendrecv, allreduce, allgather or reduce_scatter");
    return o;
}

// Small integers, different per rank and index: every float sum over ranks is exact, so
// results are compared with ==, and a block landing at the wrong rank's place shows.
float input_value(int rank, std::size_t index) { return static_cast<float>(rank + 1 + int(index % 251)); }

std::int64_t count_wrong(std::span<const float> got, const std::function<float(std::size_t)>& expected) {
    std::int64_t wrong = 0;
    for (std::size_t i = 0; i < got.size(); ++i) wrong += got[i] != expected(i) ? 1 : 0;
    return wrong;
}

// One operation at one size, as both implementations run it. `run` is a timed call (its
// buffers hold whatever the previous call left); `check` refills the inputs, poisons the
// outputs, calls once and returns this rank's count of wrong elements.
struct implementation {
    std::function<void()> run;
    std::function<std::int64_t()> check;
};

struct measured {
    double seconds = 0;  // per call: each rank's median, mean over ranks
    std::int64_t wrong = 0;  // over all ranks
};

struct op_case {
    std::string name;
    double bus_factor;   // busbw = algbw * bus_factor (nccl-tests)
    std::size_t bytes;   // nccl-tests' `size` column for this op
    std::size_t count;   // nccl-tests' `count` column
    implementation weft, raw;
};

void mpi_ok(int code, const char* call) { weft::comm::detail::mpi_check(code, call); }

double mean_over_ranks(MPI_Comm comm, double value) {
    int n = 1;
    MPI_Comm_size(comm, &n);
    mpi_ok(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_SUM, comm), "MPI_Allreduce");
    return value / n;
}

std::int64_t sum_over_ranks(MPI_Comm comm, std::int64_t value) {
    mpi_ok(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_SUM, comm), "MPI_Allreduce");
    return value;
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t k = v.size();
    return k % 2 == 1 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

// Warm-up, then the timed iterations, one weft call and one raw call in turn, each timed on
// its own, so that a neighbour's load on a shared machine falls on both alike. Reported per
// rank is the median call, not nccl-tests' mean: on 2 shared cores a rank that loses its
// core for one time slice would otherwise dominate a whole row.
std::pair<measured, measured> measure(MPI_Comm comm, op_case& c, int iters, int warmup) {
    for (int i = 0; i < warmup; ++i) {
        c.weft.run();
        c.raw.run();
    }
    std::vector<double> weft_s, raw_s;
    mpi_ok(MPI_Barrier(comm), "MPI_Barrier");
    for (int i = 0; i < iters; ++i) {
        const auto start = clock_type::now();
        c.weft.run();
        const auto middle = clock_type::now();
        c.raw.run();
        const auto end = clock_type::now();
        weft_s.push_back(std::chrono::duration<double>(middle - start).count());
        raw_s.push_back(std::chrono::duration<double>(end - middle).count());
    }
    measured weft{mean_over_ranks(comm, median(weft_s)), 0}, raw{mean_over_ranks(comm, median(raw_s)), 0};
    weft.wrong = sum_over_ranks(comm, c.weft.check());
    raw.wrong = sum_over_ranks(comm, c.raw.check());
    return {weft, raw};
}

struct result_row {
    std::string op;
    std::size_t bytes, count;
    int iters;
    measured weft, raw;
    double bus_factor;
};

double algbw(const result_row& r, const measured& m) { return double(r.bytes) / m.seconds / 1e9; }

void print_header(const std::string& op, const std::string& what) {
    std::printf("#\n# %s: %s\n", op.c_str(), what.c_str());
    std::printf("# %10s %12s %6s %33s %33s\n", "", "", "", "--------- weft::comm::mpi -------", "------------ raw MPI ------------");
    std::printf("# %10s %12s %6s %9s %7s %7s %6s %9s %7s %7s %6s %9s %5s\n", "size", "count", "type", "time",
                "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "weft/raw", "iters");
    std::printf("# %10s %12s %6s %9s %7s %7s %6s %9s %7s %7s %6s %9s %5s\n", "(B)", "(elements)", "", "(us)",
                "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "(time)", "");
}

void print_row(const result_row& r) {
    std::printf("  %10zu %12zu %6s %9.1f %7.2f %7.2f %6lld %9.1f %7.2f %7.2f %6lld %9.2f %5d\n", r.bytes, r.count,
                "float", r.weft.seconds * 1e6, algbw(r, r.weft), algbw(r, r.weft) * r.bus_factor,
                static_cast<long long>(r.weft.wrong), r.raw.seconds * 1e6, algbw(r, r.raw),
                algbw(r, r.raw) * r.bus_factor, static_cast<long long>(r.raw.wrong), r.weft.seconds / r.raw.seconds,
                r.iters);
    std::fflush(stdout);
}

// Buffers for one operation, sized for the largest run and reused for every size.
struct buffers {
    std::vector<float> send, recv;
};

int run(int argc, char** argv) {
    weft::comm::mpi_environment environment(argc, argv);
    auto world = weft::comm::mpi::world();
    const MPI_Comm comm = world.native();
    const int rank = world.rank();
    const int n = world.size();
    try {
        const options o = parse(argc, argv);
        // Each rank holds a send and a receive buffer of up to --max-bytes: more than the
        // machine has is refused by name here rather than as a bad_alloc (or the OOM killer).
        const long pages = ::sysconf(_SC_PHYS_PAGES), page_bytes = ::sysconf(_SC_PAGE_SIZE);
        if (pages > 0 && page_bytes > 0) {
            const double memory = double(pages) * double(page_bytes);
            weft::require(2.0 * double(o.max_bytes) <= memory, "--max-bytes", o.max_bytes,
                          "needs twice that in buffers per rank, more than this machine's " +
                              std::to_string(static_cast<long long>(memory / double(1 << 20))) + " MiB of memory");
        }
        if (o.op == "help") {
            if (rank == 0)
                std::printf("usage: mpirun -np N bench_comm [--min-bytes 1K] [--max-bytes 256M] [--iters 20] "
                            "[--warmup 5] [--op all|sendrecv|allreduce|allgather|reduce_scatter] [--json FILE]\n");
            return 0;
        }
        // Before the measuring, not after: rank 0 writes the figures.
        if (rank == 0 && !o.json.empty()) weft::io::require_writable(o.json, "--json");
        const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
        if (rank == 0) {
            std::printf("# weft bench_comm: weft::comm::mpi next to the raw MPI calls, %d ranks, type float\n", n);
            std::printf("# sizes %zu .. %zu bytes doubling; iterations %d, warm-up %d up to %zu bytes, fewer above "
                        "(column iters); time: the median call, mean over ranks\n",
                        o.min_bytes, o.max_bytes, o.iters, o.warmup, full_iteration_bytes);
            std::printf("# weft/raw > 1: weft is slower. #wrong: elements differing from the expected result, "
                        "summed over ranks, checked after the timed loop\n");
        }
        const std::size_t max_count = o.max_bytes / sizeof(float);
        std::vector<result_row> rows;
        buffers b;

        struct op_spec {
            const char* name;
            const char* what;
            double bus_factor;
        };
        const double nd = n;
        const op_spec specs[] = {
            {"sendrecv",
             "ring, rank r sends `size` bytes to r+1 and receives from r-1; weft isend/irecv vs MPI_Isend/Irecv/Waitall",
             1.0},
            {"allreduce", "in place, sum; weft allreduce_sum vs MPI_Allreduce(MPI_IN_PLACE)", 2 * (nd - 1) / nd},
            // nccl-tests' `size` for all-gather is the gathered (output) buffer, every rank's
            // block together (max(send, recv) bytes): each rank contributes size / n bytes.
            {"allgather", "size = the gathered buffer (n blocks); weft allgather vs MPI_Allgather", (nd - 1) / nd},
            // ... and for reduce-scatter the input buffer, n blocks; each rank keeps size / n bytes.
            {"reduce_scatter",
             "size = the input buffer (n blocks); weft reduce_scatter_sum vs MPI_Reduce_scatter_block",
             (nd - 1) / nd},
        };
        for (const auto& spec : specs) {
            const std::string name = spec.name;
            if (o.op != "all" && o.op != name) continue;
            // The largest buffers this op needs, allocated (and touched) once.
            const std::size_t max_block = name == "allgather" || name == "reduce_scatter" ? max_count / n : max_count;
            try {
                b.send.assign(name == "allgather" ? max_block : max_count, 0.0f);
                b.recv.assign(name == "reduce_scatter" ? max_block : (name == "allreduce" ? 0 : max_count), 0.0f);
            } catch (const std::bad_alloc&) {
                throw weft::invalid_argument("--max-bytes", o.max_bytes,
                                             "needs more memory than this rank can allocate for " + name +
                                                 "'s buffers; give a smaller size");
            }
            if (rank == 0) print_header(name, spec.what);
            for (std::size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
                const std::size_t total = bytes / sizeof(float);
                const std::size_t block = name == "allgather" || name == "reduce_scatter" ? total / n : total;
                if (block == 0) continue;
                op_case c{name, spec.bus_factor, 0, 0, {}, {}};
                const bool inject = o.inject_wrong && rank == 0;
                if (name == "sendrecv") {
                    const std::span<float> send(b.send.data(), block), recv(b.recv.data(), block);
                    c.bytes = block * sizeof(float);
                    c.count = block;
                    auto fill = [=] {
                        for (std::size_t i = 0; i < block; ++i) send[i] = input_value(rank, i);
                        std::fill(recv.begin(), recv.end(), std::numeric_limits<float>::quiet_NaN());
                    };
                    auto wrong = [=] {
                        return count_wrong(recv, [prev](std::size_t i) { return input_value(prev, i); });
                    };
                    c.weft.run = [&world, send, recv, next, prev] {
                        auto r = world.irecv(std::as_writable_bytes(recv), prev, 0);
                        auto s = world.isend(std::as_bytes(std::span<const float>(send)), next, 0);
                        r.wait();
                        s.wait();
                    };
                    c.raw.run = [comm, send, recv, next, prev] {
                        MPI_Request requests[2];
                        const int count = static_cast<int>(recv.size());
                        mpi_ok(MPI_Irecv(recv.data(), count, MPI_FLOAT, prev, 0, comm, &requests[0]), "MPI_Irecv");
                        mpi_ok(MPI_Isend(send.data(), count, MPI_FLOAT, next, 0, comm, &requests[1]), "MPI_Isend");
                        mpi_ok(MPI_Waitall(2, requests, MPI_STATUSES_IGNORE), "MPI_Waitall");
                    };
                    c.weft.check = [=, run = c.weft.run] {
                        fill();
                        run();
                        if (inject) recv[0] += 1;
                        return wrong();
                    };
                    c.raw.check = [=, run = c.raw.run] {
                        fill();
                        run();
                        return wrong();
                    };
                } else if (name == "allreduce") {
                    const std::span<float> values(b.send.data(), block);
                    c.bytes = block * sizeof(float);
                    c.count = block;
                    // Timed calls sum zeros in place: the values stay 0, never overflow and
                    // never turn denormal, so each call costs the same.
                    std::fill(values.begin(), values.end(), 0.0f);
                    auto fill = [=] {
                        for (std::size_t i = 0; i < block; ++i) values[i] = input_value(rank, i);
                    };
                    auto wrong = [=] {
                        return count_wrong(values, [n](std::size_t i) {
                            float sum = 0;
                            for (int r = 0; r < n; ++r) sum += input_value(r, i);
                            return sum;
                        });
                    };
                    c.weft.run = [&world, values] { world.allreduce_sum(values); };
                    c.raw.run = [comm, values] {
                        mpi_ok(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()),
                                             MPI_FLOAT, MPI_SUM, comm),
                               "MPI_Allreduce");
                    };
                    // The check leaves zeros behind for the next implementation's timed calls.
                    c.weft.check = [=, run = c.weft.run] {
                        fill();
                        run();
                        if (inject) values[0] += 1;
                        const auto w = wrong();
                        std::fill(values.begin(), values.end(), 0.0f);
                        return w;
                    };
                    c.raw.check = [=, run = c.raw.run] {
                        fill();
                        run();
                        const auto w = wrong();
                        std::fill(values.begin(), values.end(), 0.0f);
                        return w;
                    };
                } else if (name == "allgather") {
                    const std::span<float> mine(b.send.data(), block), all(b.recv.data(), block * n);
                    c.bytes = block * n * sizeof(float);
                    c.count = block * n;
                    auto fill = [=] {
                        for (std::size_t i = 0; i < block; ++i) mine[i] = input_value(rank, i);
                        std::fill(all.begin(), all.end(), std::numeric_limits<float>::quiet_NaN());
                    };
                    auto wrong = [=] {
                        return count_wrong(all, [block](std::size_t i) { return input_value(int(i / block), i % block); });
                    };
                    c.weft.run = [&world, mine, all] { world.allgather(std::span<const float>(mine), all); };
                    c.raw.run = [comm, mine, all] {
                        const int count = static_cast<int>(mine.size());
                        mpi_ok(MPI_Allgather(mine.data(), count, MPI_FLOAT, all.data(), count, MPI_FLOAT, comm),
                               "MPI_Allgather");
                    };
                    c.weft.check = [=, run = c.weft.run] {
                        fill();
                        run();
                        if (inject) all[0] += 1;
                        return wrong();
                    };
                    c.raw.check = [=, run = c.raw.run] {
                        fill();
                        run();
                        return wrong();
                    };
                } else {  // reduce_scatter
                    const std::span<float> all(b.send.data(), block * n), mine(b.recv.data(), block);
                    c.bytes = block * n * sizeof(float);
                    c.count = block * n;
                    auto fill = [=] {
                        for (std::size_t i = 0; i < all.size(); ++i) all[i] = input_value(rank, i);
                        std::fill(mine.begin(), mine.end(), std::numeric_limits<float>::quiet_NaN());
                    };
                    auto wrong = [=] {
                        return count_wrong(mine, [=](std::size_t i) {
                            float sum = 0;
                            for (int r = 0; r < n; ++r) sum += input_value(r, std::size_t(rank) * block + i);
                            return sum;
                        });
                    };
                    c.weft.run = [&world, mine, all] { world.reduce_scatter_sum(std::span<const float>(all), mine); };
                    c.raw.run = [comm, mine, all] {
                        mpi_ok(MPI_Reduce_scatter_block(all.data(), mine.data(), static_cast<int>(mine.size()),
                                                        MPI_FLOAT, MPI_SUM, comm),
                               "MPI_Reduce_scatter_block");
                    };
                    c.weft.check = [=, run = c.weft.run] {
                        fill();
                        run();
                        if (inject) mine[0] += 1;
                        return wrong();
                    };
                    c.raw.check = [=, run = c.raw.run] {
                        fill();
                        run();
                        return wrong();
                    };
                }
                const int iters = scaled(o.iters, c.bytes, 3);
                const int warmup = scaled(o.warmup, c.bytes, 1);
                const auto [weft_m, raw_m] = measure(comm, c, iters, warmup);
                rows.push_back({name, c.bytes, c.count, iters, weft_m, raw_m, spec.bus_factor});
                if (rank == 0) print_row(rows.back());
                if (bytes > o.max_bytes / 2) break;  // no overflow past the largest size
            }
        }

        std::int64_t wrong = 0;
        for (const auto& r : rows) wrong += r.weft.wrong + r.raw.wrong;
        if (rank == 0) {
            // The goal is weft within 1.05x of raw MPI from 1 MB on: the last two columns.
            constexpr std::size_t goal_bytes = std::size_t(1) << 20;
            std::printf("#\n# %-15s %14s %14s %16s %16s %16s\n", "op", "weft busbw", "raw busbw", "weft/raw time",
                        "weft/raw >=1MB", "worst >=1MB");
            std::printf("# %-15s %14s %14s %16s %16s %16s\n", "", "(GB/s, mean)", "(GB/s, mean)", "(geometric mean)",
                        "(geometric mean)", "(max)");
            for (const auto& spec : specs) {
                double weft_bw = 0, raw_bw = 0, log_ratio = 0, log_ratio_big = 0, worst_big = 0;
                int k = 0, k_big = 0;
                for (const auto& r : rows) {
                    if (r.op != spec.name) continue;
                    const double ratio = r.weft.seconds / r.raw.seconds;
                    weft_bw += algbw(r, r.weft) * r.bus_factor;
                    raw_bw += algbw(r, r.raw) * r.bus_factor;
                    log_ratio += std::log(ratio);
                    ++k;
                    if (r.bytes >= goal_bytes) {
                        log_ratio_big += std::log(ratio);
                        worst_big = std::max(worst_big, ratio);
                        ++k_big;
                    }
                }
                if (k == 0) continue;
                std::printf("# %-15s %14.2f %14.2f %16.2f", spec.name, weft_bw / k, raw_bw / k, std::exp(log_ratio / k));
                if (k_big > 0) std::printf(" %16.2f %16.2f\n", std::exp(log_ratio_big / k_big), worst_big);
                else std::printf(" %16s %16s\n", "-", "-");
            }
            std::printf("# wrong values: %lld %s\n#\n", static_cast<long long>(wrong), wrong == 0 ? "OK" : "FAILED");
            if (!o.json.empty()) {
                nlohmann::json out{{"benchmark", "bench_comm"}, {"ranks", n}, {"type", "float"},
                                   {"iters", o.iters}, {"warmup", o.warmup}, {"wrong", wrong}};
                auto& results = out["results"] = nlohmann::json::array();
                for (const auto& r : rows) {
                    auto side = [&r](const measured& m) {
                        return nlohmann::json{{"time_us", m.seconds * 1e6}, {"algbw_gbs", algbw(r, m)},
                                              {"busbw_gbs", algbw(r, m) * r.bus_factor}, {"wrong", m.wrong}};
                    };
                    results.push_back({{"op", r.op}, {"size", r.bytes}, {"count", r.count}, {"iters", r.iters},
                                       {"weft", side(r.weft)}, {"raw", side(r.raw)},
                                       {"weft_over_raw", r.weft.seconds / r.raw.seconds}});
                }
                // Whole or not at all: an earlier run's figures are not left half overwritten.
                const std::string text = out.dump(2) + '\n';
                weft::io::write_file_atomically(o.json, std::as_bytes(std::span<const char>(text)));
            }
        }
        return wrong == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        // Another rank may be inside a collective waiting for this one: abort the job
        // rather than hang in MPI_Finalize.
        std::fprintf(stderr, "bench_comm (rank %d): %s\n", rank, e.what());
        std::fflush(stderr);
        if (n > 1) MPI_Abort(MPI_COMM_WORLD, 2);
        return 2;
    }
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_comm: %s\n", e.what());
        return 2;
    }
}
