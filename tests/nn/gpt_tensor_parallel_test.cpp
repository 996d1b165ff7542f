// Tensor parallelism of gpt_stage (Megatron-style): tp ranks run as threads of
// weft::comm::local. For tp = 2 and 4 (vocab 50: uneven over 4) every kind of stage must
// give the tp = 1 stage's loss, outputs, input gradient and parameter gradients (the
// latter assembled into global tensors from all tp ranks through the registry's runs),
// within 1e-5 relative NORM-WISE per tensor; replicated tensors and activations must be
// bit-identical on all tp ranks. Also: initial slices, layouts, splits and errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cpu_backends.hpp"
#include "test_support.hpp"
#include "weft/comm/local.hpp"
#include "weft/core/deferred_value.hpp"
#include "weft/core/memory_space.hpp"
#include "weft/exec/cpu.hpp"
#include "weft/models/gpt.hpp"
#include "weft/nn/gpt.hpp"
#include "weft/nn/tensor_parallel.hpp"
#include "weft/nn/vocab_parallel_cross_entropy.hpp"

using weft::nn::gpt_config;
using weft::nn::gpt_stage;
using weft::index_range;
using weft::parameter_info;
using weft::parameter_registry;
using weft::split_range;
using weft::tensor_split;
using weft::nn::token_view;
using weft::nn::tp_group;
using weft::nn::unit_range;
using backend = weft::exec::cpu;
using weft_test::cpu;
using matrix = backend::matrix;

namespace {

const gpt_config config{.num_layers = 2, .d_model = 32, .num_heads = 4, .vocab_size = 50, .seq_len = 8};
constexpr int sequences = 2;
constexpr int rows = sequences * 8;
constexpr float scale = 0.5f;
constexpr double tolerance = 1e-5;

std::vector<std::int32_t> random_tokens(std::size_t n, int vocab, std::string_view tag) {
    std::vector<std::int32_t> tokens(n);
    for (std::size_t i = 0; i < n; ++i) tokens[i] = std::int32_t(weft::rng::uniform(5, tag, i) * float(vocab)) % vocab;
    return tokens;
}

template <class Matrix>
std::vector<float> to_vector(const Matrix& m) {
    return {m.data(), m.data() + m.size()};
}

// exec::cpu as a device backend would look to the tensor-parallel layers: its memory space is
// not the host's, so they take the path through copy_to_host and copy_from_host
// (nn/tensor_parallel.hpp), which it counts. The copies are exact, so every number must be
// the plain CPU's, bit for bit.
struct copying_cpu : weft::exec::cpu {
    using memory_space = weft::device_space;
    static constexpr std::string_view name = "copying_cpu";
    int copies = 0;
    void copy_to_host(const matrix& m, std::span<float> host) {
        ++copies;
        weft::exec::cpu::copy_to_host(m, host);
    }
    void copy_from_host(std::span<const float> host, matrix& m) {
        ++copies;
        weft::exec::cpu::copy_from_host(host, m);
    }
};
static_assert(weft::exec::compute_backend<copying_cpu> && !weft::nn::host_matrices<copying_cpu>);

// The same without the vocabulary-parallel loss's kernels: the loss's passes then run on a
// host copy of the logits.
struct copying_cpu_without_loss_kernels : copying_cpu {
    void row_max() = delete;
    void softmax_partial_sums() = delete;
    void softmax_gradient() = delete;
};
static_assert(weft::exec::vocab_parallel_loss_kernels<copying_cpu> &&
              !weft::exec::vocab_parallel_loss_kernels<copying_cpu_without_loss_kernels>);

// The same without the vocabulary-parallel embedding's kernels: the first stage's rows are
// then built, and its wte gradient summed, on host copies.
struct copying_cpu_without_embedding_kernels : copying_cpu {
    void vocab_parallel_embedding_forward() = delete;
    void vocab_parallel_embedding_backward_weight() = delete;
};
static_assert(weft::exec::vocab_parallel_embedding_kernels<copying_cpu> &&
              !weft::exec::vocab_parallel_embedding_kernels<copying_cpu_without_embedding_kernels>);

// A copying backend with exec::matrix_reduction_kernels, as exec::cuda has them: over a group
// whose communicator moves device memory, the layers' sums go through reduce_matrix, the
// embedding's through vocab_parallel_embedding_forward and the loss's through
// vocab_parallel_cross_entropy, which it counts, and not through host copies. Its "device memory" is the host's, so the sum must still be exec::cpu's, bit for bit.
struct reducing_cpu : copying_cpu {
    static constexpr std::string_view name = "reducing_cpu";
    int reductions = 0;
    int embedding_sums = 0;
    int loss_reductions = 0;
    template <class Gather, class Sum>
    weft::deferred_value<float> vocab_parallel_cross_entropy(const matrix& logits, std::span<const std::int32_t> labels,
                                                             int first_column, float row_scale, int group_size,
                                                             Gather&& gather, Sum&& sum, matrix& dlogits) {
        ++loss_reductions;
        return copying_cpu::vocab_parallel_cross_entropy(logits, labels, first_column, row_scale, group_size,
                                                         std::forward<Gather>(gather), std::forward<Sum>(sum),
                                                         dlogits);
    }
    template <class Reduce>
    matrix vocab_parallel_embedding_forward(std::span<const std::int32_t> tokens, std::span<const float> wte_rows,
                                            int first_row, std::span<const float> wpe, int width, int seq_len,
                                            Reduce&& reduce) {
        ++embedding_sums;
        return copying_cpu::vocab_parallel_embedding_forward(tokens, wte_rows, first_row, wpe, width, seq_len,
                                                             std::forward<Reduce>(reduce));
    }
    template <class Reduce>
    void reduce_matrix(matrix& m, std::span<const float> bias, Reduce&& reduce) {
        ++reductions;
        std::vector<float> wide(m.data(), m.data() + m.size());  // the fp32 buffer exec::cuda widens into
        reduce(std::span<float>(wide));
        for (std::size_t i = 0; i < wide.size() && !bias.empty(); i += bias.size())
            for (std::size_t c = 0; c < bias.size(); ++c) wide[i + c] += bias[c];
        std::copy(wide.begin(), wide.end(), m.data());
    }
};
static_assert(weft::exec::matrix_reduction_kernels<reducing_cpu> && !weft::exec::matrix_reduction_kernels<copying_cpu>);

// comm::local as a device communicator would look to make_tp_group (its memory space is not
// the host's); it moves the same host memory.
struct device_memory_local : weft::comm::local {
    using memory_space = weft::device_space;
    explicit device_memory_local(weft::comm::local inner) : weft::comm::local(std::move(inner)) {}
    [[nodiscard]] device_memory_local split(int color, int key) {
        return device_memory_local(weft::comm::local::split(color, key));
    }
};
static_assert(weft::comm::communicator<device_memory_local>);

// Moves the parameters away from their initial values (LayerNorm 1, biases 0), each element
// by its GLOBAL index, so that every tp split perturbs the same model the same way.
template <class Backend>
void perturb(gpt_stage<Backend>& stage) {
    const auto p = stage.parameters();
    for (const parameter_info& info : stage.registry().entries())
        info.for_each_run([&](std::size_t local, std::size_t global, std::size_t length) {
            for (std::size_t j = 0; j < length; ++j)
                p[info.offset + local + j] += float(0.2 * weft::rng::normal(3, "perturb." + info.name, global + j));
        });
}

// What one rank (or the tp = 1 reference) ends with.
struct rank_result {
    std::vector<parameter_info> entries;
    std::vector<float> params, grads;
    float loss = 0;
    std::vector<float> output;  // stage output: activations, or this rank's logits columns
    std::vector<float> dx;      // input gradient (non-first stages)
};

// Forward, loss or a given output gradient, backward_input and backward_weight of one
// micro-batch. The input, targets and output gradient depend only on the units.
template <class Backend>
rank_result run_stage(gpt_stage<Backend>& stage, bool perturbed = true) {
    using matrix = typename Backend::matrix;
    if (perturbed) perturb(stage);
    rank_result out;
    out.entries.assign(stage.registry().entries().begin(), stage.registry().entries().end());
    const auto tokens = random_tokens(rows, config.vocab_size, "tokens");
    const auto targets = random_tokens(rows, config.vocab_size, "targets");
    typename gpt_stage<Backend>::stash s;
    const matrix y = stage.is_first() ? stage.forward(token_view{tokens, sequences, config.seq_len}, s)
                                      : stage.forward(weft_test::random_matrix<matrix>(rows, config.d_model, "x"), s);
    out.output = to_vector(y);
    matrix dy;
    if (stage.is_last()) {
        // What the engine calls: the plain cross-entropy at tp = 1, the vocab-parallel one above.
        const weft::data::token_batch batch{
            .rows = sequences, .seq_len = config.seq_len, .inputs = tokens, .targets = targets};
        auto ce = weft::models::gpt::loss<Backend>(stage, y, batch, 0, sequences, scale);
        out.loss = ce.loss;
        dy = std::move(ce.dlogits);
    } else {
        dy = weft_test::random_matrix<matrix>(rows, config.d_model, "dy", 0.1);
    }
    const matrix dx = stage.backward_input(std::move(dy), s);
    out.dx = to_vector(dx);
    stage.backward_weight(s);
    out.params.assign(stage.parameters().begin(), stage.parameters().end());
    out.grads.assign(stage.gradients().begin(), stage.gradients().end());
    return out;
}

// tp ranks as threads; results collected for the main thread to check.
std::vector<rank_result> run_tp(int tp, unit_range units, bool perturbed = true) {
    std::vector<rank_result> results(static_cast<std::size_t>(tp));
    weft::comm::local::run(tp, [&](weft::comm::local& comm) {
        gpt_stage<backend> stage(cpu, config, units, weft::nn::make_tp_group<float>(comm));
        results[std::size_t(comm.rank())] = run_stage(stage, perturbed);
    });
    return results;
}

// The same over a copying backend, one per rank thread; copies[r] is how many matrices rank r
// copied to or from the host.
template <class Copying>
std::vector<rank_result> run_tp_copying(int tp, unit_range units, std::vector<int>& copies) {
    std::vector<rank_result> results(static_cast<std::size_t>(tp));
    copies.assign(std::size_t(tp), 0);
    weft::comm::local::run(tp, [&](weft::comm::local& comm) {
        Copying rank_backend;
        gpt_stage<Copying> stage(rank_backend, config, units, weft::nn::make_tp_group<float>(comm));
        results[std::size_t(comm.rank())] = run_stage(stage);
        copies[std::size_t(comm.rank())] = rank_backend.copies;
    });
    return results;
}

// The same over reducing_cpu, its tp group made over device_memory_local (or, with
// `device_group` false, over comm::local itself). Per rank r: copies[r] as above, and how
// many reduce_matrix, vocab_parallel_embedding_forward and vocab_parallel_cross_entropy it ran.
struct reduction_counts {
    std::vector<int> copies, reductions, embedding_sums, loss_reductions;
};
std::vector<rank_result> run_tp_reducing(int tp, unit_range units, bool device_group, reduction_counts& counts) {
    std::vector<rank_result> results(static_cast<std::size_t>(tp));
    counts.copies.assign(std::size_t(tp), 0);
    counts.reductions.assign(std::size_t(tp), 0);
    counts.embedding_sums.assign(std::size_t(tp), 0);
    counts.loss_reductions.assign(std::size_t(tp), 0);
    weft::comm::local::run(tp, [&](weft::comm::local& comm) {
        device_memory_local device_comm(comm.split(0, comm.rank()));
        const auto group =
            device_group ? weft::nn::make_tp_group<float>(device_comm) : weft::nn::make_tp_group<float>(comm);
        reducing_cpu rank_backend;
        gpt_stage<reducing_cpu> stage(rank_backend, config, units, group);
        results[std::size_t(comm.rank())] = run_stage(stage);
        const auto r = std::size_t(comm.rank());
        counts.copies[r] = rank_backend.copies;
        counts.reductions[r] = rank_backend.reductions;
        counts.embedding_sums[r] = rank_backend.embedding_sums;
        counts.loss_reductions[r] = rank_backend.loss_reductions;
    });
    return results;
}

// One tensor of every rank, assembled into the global tensor through the registry's runs.
// Every global element must be covered exactly once by the split tensors' pieces; a
// replicated tensor's copies must be identical bit for bit (sets *replicas_equal).
std::vector<float> assemble(const std::vector<rank_result>& ranks, const std::string& name, bool gradients,
                            bool* replicas_equal, bool* covered_once) {
    std::vector<float> global;
    std::vector<int> hits;
    *replicas_equal = true;
    for (const rank_result& r : ranks) {
        const parameter_info* info = nullptr;
        for (const auto& e : r.entries)
            if (e.name == name) info = &e;
        REQUIRE(info != nullptr);
        if (global.empty()) {
            global.assign(info->global_size(), 0.0f);
            hits.assign(info->global_size(), 0);
        }
        const auto& buffer = gradients ? r.grads : r.params;
        if (info->split.whole()) {
            const float* mine = buffer.data() + info->offset;
            if (&r != &ranks.front())
                *replicas_equal = *replicas_equal && std::memcmp(mine, global.data(), info->size * sizeof(float)) == 0;
            std::copy(mine, mine + info->size, global.begin());
            for (auto& h : hits) h = 1;
            continue;
        }
        info->for_each_run([&](std::size_t local, std::size_t g, std::size_t length) {
            for (std::size_t j = 0; j < length; ++j) {
                global[g + j] = buffer[info->offset + local + j];
                ++hits[g + j];
            }
        });
    }
    *covered_once = std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; });
    return global;
}

double norm_error(const std::vector<float>& got, const std::vector<float>& want) {
    double diff = 0, ref = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        diff += (double(got[i]) - double(want[i])) * (double(got[i]) - double(want[i]));
        ref += double(want[i]) * double(want[i]);
    }
    return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
    // memcmp must not see the null data() of an empty vector (a first stage has no dx).
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// a equals b bit for bit, and the copying backend made `copies` host copies on the way.
void check_same_bits(const rank_result& a, const rank_result& b, int copies) {
    // Every stage reduces: a row-parallel output, a column-parallel input gradient.
    CHECK(copies > 0);
    CHECK(std::memcmp(&a.loss, &b.loss, sizeof(float)) == 0);
    CHECK(bit_equal(a.output, b.output));
    CHECK(bit_equal(a.dx, b.dx));
    CHECK(bit_equal(a.grads, b.grads));
    CHECK(bit_equal(a.params, b.params));
}

}  // namespace

TEST_CASE("split_range gives the first extent % count pieces one more element", "[nn][tp]") {
    CHECK(split_range(50, 0, 4) == index_range{0, 13});
    CHECK(split_range(50, 1, 4) == index_range{13, 26});
    CHECK(split_range(50, 2, 4) == index_range{26, 38});
    CHECK(split_range(50, 3, 4) == index_range{38, 50});
    CHECK(split_range(32, 1, 4) == index_range{8, 16});
    CHECK(split_range(7, 0, 1) == index_range{0, 7});
    CHECK_THROWS_WITH(split_range(7, 2, 2), Catch::Contains("index"));
    CHECK_THROWS_WITH(split_range(7, 0, 0), Catch::Contains("count"));
}

TEST_CASE("a split registry entry keeps the global shape and maps local runs to global indices", "[nn][tp]") {
    parameter_registry registry;
    registry.add("a", {3});
    // c_attn-like: [in 2, 3 blocks of 4] columns, piece 1 of 2 of every block.
    const std::size_t offset = registry.add("w", {2, 12}, tensor_split{1, 3, 1, 2});
    registry.add("b", {5, 2}, tensor_split{0, 1, 0, 2});      // rows [0, 3)
    registry.add("whole", {2, 2}, tensor_split{1, 1, 0, 1});  // over one rank: the whole tensor
    CHECK(offset == 3);
    const auto& w = registry.find("w");
    CHECK(w.shape == std::vector<int>{2, 12});
    CHECK(w.local_shape() == std::vector<int>{2, 6});
    CHECK(w.size == 12);
    CHECK(w.global_size() == 24);
    std::vector<std::vector<std::size_t>> runs;
    w.for_each_run([&](std::size_t l, std::size_t g, std::size_t n) { runs.push_back({l, g, n}); });
    const std::vector<std::vector<std::size_t>> want{{0, 2, 2},  {2, 6, 2},  {4, 10, 2},
                                                     {6, 14, 2}, {8, 18, 2}, {10, 22, 2}};
    CHECK(runs == want);
    const auto& b = registry.find("b");
    CHECK(b.local_shape() == std::vector<int>{3, 2});
    runs.clear();
    b.for_each_run([&](std::size_t l, std::size_t g, std::size_t n) { runs.push_back({l, g, n}); });
    CHECK(runs == std::vector<std::vector<std::size_t>>{{0, 0, 6}});  // one run: outermost dimension
    CHECK(registry.find("whole").split == tensor_split{});
    CHECK(registry.total_size() == 3 + 12 + 6 + 4);
    CHECK_THROWS_WITH(registry.add("c", {4, 5}, tensor_split{1, 2, 0, 2}), Catch::Contains("parts"));
    CHECK_THROWS_WITH(registry.add("d", {4, 3}, tensor_split{1, 1, 0, 4}), Catch::Contains("count"));
    CHECK_THROWS_WITH(registry.add("e", {4, 3}, tensor_split{2, 1, 0, 2}), Catch::Contains("dim"));
}

TEST_CASE("tp_group over weft::comm::local all-reduces and all-gathers", "[nn][tp]") {
    std::vector<std::vector<double>> sums(3), gathered(3);
    weft::comm::local::run(3, [&](weft::comm::local& comm) {
        const auto tp = weft::nn::make_tp_group<double>(comm);
        std::vector<double> v{double(tp.rank), 1.0};
        tp.allreduce_sum(v);
        const std::vector<double> mine{double(tp.rank), 10.0 + tp.rank};
        std::vector<double> all(6);
        tp.allgather(mine, all);
        sums[std::size_t(tp.rank)] = v;
        gathered[std::size_t(tp.rank)] = all;
    });
    for (int r = 0; r < 3; ++r) {
        CHECK(sums[std::size_t(r)] == std::vector<double>{3.0, 3.0});
        CHECK(gathered[std::size_t(r)] == std::vector<double>{0, 10, 1, 11, 2, 12});
    }
    const tp_group<float> none;  // no tensor parallelism: never communicates
    std::vector<float> x{1.5f};
    none.allreduce_sum(x);
    CHECK(x[0] == 1.5f);
}

TEST_CASE("tensor-parallel gpt stages equal the tp = 1 stage", "[nn][gpt][tp]") {
    const std::vector<unit_range> stages{{0, 4}, {0, 2}, {1, 3}, {2, 4}};  // whole, first, middle, last
    for (const unit_range units : stages) {
        gpt_stage<backend> reference_stage(cpu, config, units);
        const rank_result reference = run_stage(reference_stage);
        for (const int tp : {2, 4}) {
            INFO("units [" << units.first << ", " << units.last << "), tp = " << tp);
            const auto ranks = run_tp(tp, units);
            const bool last = units.last == config.num_units();
            if (last) {
                INFO("loss " << ranks[0].loss << " vs tp = 1 " << reference.loss);
                CHECK(std::abs(double(ranks[0].loss) - double(reference.loss)) <= tolerance * std::abs(reference.loss));
                for (const auto& r : ranks) CHECK(r.loss == ranks[0].loss);
                // The logits: each rank's vocabulary columns of the tp = 1 logits.
                std::vector<float> logits(reference.output.size());
                for (int q = 0; q < tp; ++q) {
                    const index_range cols = split_range(config.vocab_size, q, tp);
                    const auto& mine = ranks[std::size_t(q)].output;
                    REQUIRE(mine.size() == std::size_t(rows * cols.size()));
                    for (int r = 0; r < rows; ++r)
                        for (int c = 0; c < cols.size(); ++c)
                            logits[std::size_t(r * config.vocab_size + cols.first + c)] =
                                mine[std::size_t(r * cols.size() + c)];
                }
                CHECK(norm_error(logits, reference.output) <= tolerance);
            } else {
                CHECK(norm_error(ranks[0].output, reference.output) <= tolerance);
                for (const auto& r : ranks) CHECK(bit_equal(r.output, ranks[0].output));
            }
            if (units.first > 0) {
                REQUIRE(ranks[0].dx.size() == reference.dx.size());
                CHECK(norm_error(ranks[0].dx, reference.dx) <= tolerance);
                for (const auto& r : ranks) CHECK(bit_equal(r.dx, ranks[0].dx));
            }
            for (const parameter_info& info : reference.entries) {
                INFO(info.name);
                bool replicas_equal = false, covered_once = false;
                const auto grad = assemble(ranks, info.name, true, &replicas_equal, &covered_once);
                const std::vector<float> want(reference.grads.begin() + std::ptrdiff_t(info.offset),
                                              reference.grads.begin() + std::ptrdiff_t(info.offset + info.size));
                CHECK(covered_once);
                CHECK(replicas_equal);
                CHECK(norm_error(grad, want) <= tolerance);
                CHECK(norm_error(want, std::vector<float>(want.size(), 0.0f)) > 0);  // not trivially zero
            }
        }
    }
}

TEST_CASE("tensor-parallel gpt stages on a backend the host copies compute what exec::cpu does, bit for bit",
          "[nn][gpt][tp]") {
    // What exec::cuda's tensor parallelism runs over a group of host memory: the steps
    // between kernels on host copies, and the vocabulary-parallel loss and embedding gradient
    // through the backend's kernels (or, without them, on copies).
    const std::vector<unit_range> stages{{0, 4}, {0, 2}, {1, 3}, {2, 4}};  // whole, first, middle, last
    for (const unit_range units : stages) {
        const int tp = 2;
        INFO("units [" << units.first << ", " << units.last << "), tp = " << tp);
        const auto want = run_tp(tp, units);
        std::vector<int> copies, copies_without_loss, copies_without_embedding;
        const auto with_kernels = run_tp_copying<copying_cpu>(tp, units, copies);
        const auto without_loss = run_tp_copying<copying_cpu_without_loss_kernels>(tp, units, copies_without_loss);
        const auto without_embedding =
            run_tp_copying<copying_cpu_without_embedding_kernels>(tp, units, copies_without_embedding);
        const bool first = units.first == 0;
        const bool last = units.last == config.num_units();
        for (int r = 0; r < tp; ++r) {
            INFO("tp rank " << r);
            const auto i = std::size_t(r);
            // The last stage's loss copies its logits and gradient only without the loss kernels;
            // the first stage's embedding copies dy for its gradient only without its kernels.
            CHECK(copies_without_loss[i] == copies[i] + (last ? 2 : 0));
            CHECK(copies_without_embedding[i] == copies[i] + (first ? 1 : 0));
            const struct {
                const char* kernels;
                const std::vector<rank_result>& results;
                int copies;
            } runs[] = {{"with the kernels", with_kernels, copies[i]},
                        {"without the loss kernels", without_loss, copies_without_loss[i]},
                        {"without the embedding kernels", without_embedding, copies_without_embedding[i]}};
            for (const auto& run : runs) {
                INFO(run.kernels);
                check_same_bits(run.results[i], want[i], run.copies);
            }
        }
    }
}

TEST_CASE("tensor-parallel sums stay in a device backend's memory over a device communicator", "[nn][gpt][tp]") {
    // exec::cuda over comm::nccl: the row-parallel outputs (with their bias), the
    // column-parallel input gradients and the head's input gradient are summed by the
    // backend's reduce_matrix, each saving the two host copies of the portable path, the
    // embedding's rows by its vocab_parallel_embedding_forward, saving the one copy up, and
    // the loss's maxima and sums by its vocab_parallel_cross_entropy.
    const std::vector<unit_range> stages{{0, 4}, {0, 2}, {1, 3}, {2, 4}};  // whole, first, middle, last
    for (const unit_range units : stages) {
        const int tp = 2;
        INFO("units [" << units.first << ", " << units.last << "), tp = " << tp);
        const auto want = run_tp(tp, units);
        std::vector<int> host_copies;
        static_cast<void>(run_tp_copying<copying_cpu>(tp, units, host_copies));
        reduction_counts device, host;
        const auto on_device = run_tp_reducing(tp, units, true, device);
        const auto host_group = run_tp_reducing(tp, units, false, host);
        // Per block: the attention's and the MLP's row-parallel outputs forward, their
        // column-parallel inputs' gradients backward; the head's input gradient on the last.
        const int blocks = std::max(0, std::min(units.last, config.num_layers + 1) - std::max(units.first, 1));
        const bool first = units.first == 0;
        const bool last = units.last == config.num_units();
        const int expected = 4 * blocks + (last ? 1 : 0);
        REQUIRE(expected > 0);
        for (int r = 0; r < tp; ++r) {
            INFO("tp rank " << r);
            const auto i = std::size_t(r);
            CHECK(device.reductions[i] == expected);
            CHECK(device.embedding_sums[i] == (first ? 1 : 0));
            CHECK(device.loss_reductions[i] == (last ? 1 : 0));
            CHECK(device.copies[i] == host_copies[i] - 2 * expected - (first ? 1 : 0));
            // A group of host memory keeps the host path, which a device pointer would break.
            CHECK(host.reductions[i] == 0);
            CHECK(host.embedding_sums[i] == 0);
            CHECK(host.loss_reductions[i] == 0);
            CHECK(host.copies[i] == host_copies[i]);
            check_same_bits(host_group[i], want[i], host.copies[i]);
            CHECK(std::memcmp(&on_device[i].loss, &want[i].loss, sizeof(float)) == 0);
            CHECK(bit_equal(on_device[i].output, want[i].output));
            CHECK(bit_equal(on_device[i].dx, want[i].dx));
            CHECK(bit_equal(on_device[i].grads, want[i].grads));
            CHECK(bit_equal(on_device[i].params, want[i].params));
        }
    }
}

TEST_CASE("tensor-parallel slices start as the tp = 1 tensors, exactly", "[nn][gpt][tp]") {
    const gpt_stage<backend> whole(cpu, config, {0, 4});
    for (const int tp : {2, 4}) {
        INFO("tp = " << tp);
        const auto ranks = run_tp(tp, {0, 4}, false);
        std::size_t split = 0;
        for (const parameter_info& info : whole.registry().entries()) {
            INFO(info.name);
            bool replicas_equal = false, covered_once = false;
            const auto values = assemble(ranks, info.name, false, &replicas_equal, &covered_once);
            const auto want = whole.parameters().subspan(info.offset, info.size);
            CHECK(covered_once);
            CHECK(replicas_equal);
            CHECK(bit_equal(values, std::vector<float>(want.begin(), want.end())));
            if (!ranks[0].entries.empty()) {
                for (const auto& e : ranks[0].entries)
                    if (e.name == info.name && !e.split.whole()) ++split;
            }
        }
        // wte, and per block c_attn.{weight,bias}, attn.c_proj.weight, c_fc.{weight,bias}, mlp.c_proj.weight.
        CHECK(split == 1 + 6 * std::size_t(config.num_layers));
    }
}

TEST_CASE("gpt_stage::layout with tp rank and size is the tp stage's registry", "[nn][gpt][tp]") {
    for (const unit_range units : {unit_range{0, 4}, unit_range{0, 1}, unit_range{1, 3}, unit_range{3, 4}})
        for (const int tp : {1, 2, 4})
            for (int rank = 0; rank < tp; ++rank) {
                INFO("units [" << units.first << ", " << units.last << "), rank " << rank << " of " << tp);
                const auto layout = gpt_stage<backend>::layout(config, units, rank, tp);
                // Building a stage does not communicate: a group with only rank and size will do.
                const gpt_stage<backend> stage(cpu, config, units, tp_group<float>::without_communication(rank, tp));
                weft_test::check_same_layout(layout, stage.registry());
                CHECK(layout.total_size() == stage.parameters().size());
                if (units.last == config.num_units())
                    CHECK(stage.output_width() == split_range(config.vocab_size, rank, tp).size());
                CHECK(stage.tp().size == tp);
            }
    // tp = 1 is the registry without tensor parallelism, split descriptors included.
    const auto plain = gpt_stage<backend>::layout(config, {0, 4});
    for (const auto& e : plain.entries()) CHECK(e.split.whole());
    CHECK(plain.find("h.0.attn.c_attn.weight").size == std::size_t(32 * 96));
    const auto quarter = gpt_stage<backend>::layout(config, {0, 4}, 3, 4);
    CHECK(quarter.find("h.0.attn.c_attn.weight").local_shape() == std::vector<int>{32, 24});
    CHECK(quarter.find("h.0.attn.c_proj.weight").local_shape() == std::vector<int>{8, 32});
    CHECK(quarter.find("h.1.mlp.c_fc.bias").local_shape() == std::vector<int>{32});
    CHECK(quarter.find("h.1.mlp.c_proj.weight").local_shape() == std::vector<int>{32, 32});
    CHECK(quarter.find("wte.weight").local_shape() == std::vector<int>{12, 32});
    CHECK(quarter.find("wte.weight").shape == std::vector<int>{50, 32});
}

TEST_CASE("a tp size that does not divide num_heads is a clear error", "[nn][gpt][tp]") {
    CHECK_THROWS_AS(gpt_stage<backend>::layout(config, {0, 4}, 0, 3), weft::error);
    CHECK_THROWS_WITH(gpt_stage<backend>::layout(config, {1, 2}, 1, 3), Catch::Contains("num_heads"));
    CHECK_THROWS_WITH((gpt_stage<backend>(cpu, config, {0, 4}, tp_group<float>::without_communication(0, 8))),
                      Catch::Contains("num_heads") && Catch::Contains("tp = 8"));
    CHECK_THROWS_WITH(gpt_stage<backend>::layout(config, {0, 4}, 2, 2), Catch::Contains("rank"));
}

TEST_CASE("a tp group of size 1 changes nothing, bit for bit", "[nn][gpt][tp]") {
    gpt_stage<backend> plain(cpu, config, {0, 4});
    const rank_result want = run_stage(plain);
    const auto got = run_tp(1, {0, 4});
    CHECK(got[0].loss == want.loss);
    CHECK(bit_equal(got[0].output, want.output));
    CHECK(bit_equal(got[0].grads, want.grads));
}

TEST_CASE("vocab-parallel cross-entropy equals cross_entropy on the whole logits", "[nn][tp]") {
    const auto logits = weft_test::random_matrix<matrix>(6, 50, "logits", 3.0);
    const auto labels = random_tokens(6, 50, "labels");
    const auto want = weft::nn::cross_entropy(cpu, logits, labels, 0.25f);
    std::vector<float> losses(4);
    matrix dlogits(6, 50);
    weft::comm::local::run(4, [&](weft::comm::local& comm) {
        const auto tp = weft::nn::make_tp_group<float>(comm);
        const index_range cols = split_range(50, tp.rank, tp.size);
        const matrix mine = logits.middleCols(cols.first, cols.size());
        const auto got = weft::nn::vocab_parallel_cross_entropy(cpu, mine, labels, cols, 50, tp, 0.25f);
        losses[std::size_t(tp.rank)] = got.loss;
        dlogits.middleCols(cols.first, cols.size()) = got.dlogits;  // disjoint columns per rank
    });
    CHECK(std::abs(losses[0] - want.loss) <= 1e-6f * want.loss);
    for (float l : losses) CHECK(l == losses[0]);
    CHECK((dlogits - want.dlogits).norm() <= 1e-6 * want.dlogits.norm());
}
