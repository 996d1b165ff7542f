// examples/train_gpt_cuda: trains GPT-2 on one GPU (train::cuda::gpt_trainer: bf16 GEMMs
// and activations, fp32 master weights, AdamW) on an llm.c token file. The same model,
// options, data order and initial weights as train_gpt on the CPU; step 0 runs eagerly,
// then the whole step is captured into a CUDA graph and replayed (--no-graph: eager).
//
//   make_dataset --out-dir data
//   train_gpt_cuda --layers 12 --d-model 768 --heads 12 --seq-len 1024 --batch 16 --data data/train.bin
//
// Every option is checked before the first CUDA call, so bad input fails the same way
// on a machine without a GPU; there, valid input ends with a message and exit code 77.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <span>
#include <string>

#include "train_gpt_cuda_host.hpp"
#include "weft/exec/cuda/device_buffer.hpp"
#include "weft/exec/cuda/graph.hpp"
#include "weft/exec/cuda/runtime.hpp"
#include "weft/exec/cuda/stream.hpp"
#include "weft/train/cuda/gpt_trainer.cuh"
#include "weft/train/mfu.hpp"

namespace cu = weft::cuda;

namespace {

// ctest's and the CUDA tests' code for "skipped": valid input, but no GPU to run on.
constexpr int exit_no_gpu = 77;

// Page-locked host memory for a batch's token ids: cudaMemcpyAsync from it is ordered on
// the training stream before the step (eager or replayed) that reads the device copy.
template <class T>
class pinned_buffer {
public:
    explicit pinned_buffer(std::size_t size) : size_(size) {
        void* pointer = nullptr;
        cu::check(cudaMallocHost(&pointer, size * sizeof(T)), "cudaMallocHost");
        data_ = static_cast<T*>(pointer);
    }
    pinned_buffer(const pinned_buffer&) = delete;
    pinned_buffer& operator=(const pinned_buffer&) = delete;
    ~pinned_buffer() { static_cast<void>(cudaFreeHost(data_)); }

    [[nodiscard]] std::span<T> span() { return {data_, size_}; }
    [[nodiscard]] std::size_t bytes() const { return size_ * sizeof(T); }
    [[nodiscard]] const T* data() const { return data_; }

private:
    T* data_ = nullptr;
    std::size_t size_ = 0;
};

void train(weft_examples::gpt_cuda_host& host, const weft_examples::gpt_cuda_options& o) {
    const std::string device = cu::device_name(0);
    const double peak_tflops = weft::train::bf16_peak_tflops(device);
    host.print_header(device, peak_tflops, !o.no_graph);

    cu::stream stream;  // a created stream: graph capture refuses the legacy default one
    weft::train::cuda::gpt_trainer model(host.config(), host.registry(), host.initial_parameters(), o.batch);
    if (const auto& state = host.initial_optimizer())
        model.restore_optimizer(state->step, state->exp_avg, state->exp_avg_sq);
    const cu::adamw_hyperparameters adamw{
        .lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = 1e-8, .weight_decay = o.weight_decay};

    // Fixed device buffers: a captured graph holds these pointers, so every step's batch
    // is copied into them rather than into fresh allocations.
    const std::size_t tokens = std::size_t(model.tokens());
    pinned_buffer<std::int32_t> host_inputs(tokens), host_targets(tokens);
    cu::device_buffer<std::int32_t> inputs(tokens), targets(tokens);
    const auto enqueue_step = [&](cudaStream_t s) { model.enqueue_step(inputs.data(), targets.data(), adamw, s); };

    cu::graph step_graph;
    using clock = std::chrono::steady_clock;
    for (int step = 0; step < o.steps; ++step) {
        // The step's time includes reading its batch, as llm.c's does.
        const auto start = clock::now();
        host.batch(step, host_inputs.span(), host_targets.span());
        cu::check(
            cudaMemcpyAsync(inputs.data(), host_inputs.data(), host_inputs.bytes(), cudaMemcpyHostToDevice, stream),
            "cudaMemcpyAsync of the inputs");
        cu::check(
            cudaMemcpyAsync(targets.data(), host_targets.data(), host_targets.bytes(), cudaMemcpyHostToDevice, stream),
            "cudaMemcpyAsync of the targets");
        if (step_graph.empty())
            enqueue_step(stream);
        else
            step_graph.launch(stream);
        // Each step is waited for: its loss is printed, and the pinned batch is reused.
        stream.synchronize();
        const double milliseconds = std::chrono::duration<double, std::milli>(clock::now() - start).count();
        host.log_step(step, double(model.loss()), milliseconds, peak_tflops);

        // The eager step 0 has let cuBLASLt pick its algorithms (outside any capture);
        // later steps replay it. The first replay also uploads the graph, so step 1 is slower.
        if (step == 0 && !o.no_graph && o.steps > 1) step_graph = cu::graph::capture(stream, enqueue_step);
    }
    const auto state = model.optimizer();
    host.save(model.parameters(), {state.step, state.exp_avg, state.exp_avg_sq});
}

}  // namespace

int main(int argc, char** argv) {
    weft_examples::gpt_cuda_options options;
    if (const int code = weft_examples::parse_gpt_cuda_options(argc, argv, options); code >= 0) return code;
    try {
        weft_examples::gpt_cuda_host host(options);  // every check that needs no GPU
        if (cu::device_count() == 0) {
            std::fprintf(stderr,
                         "train_gpt_cuda: no CUDA device is visible (no GPU, or no driver): this program trains on "
                         "one GPU; the CPU trainer is train_gpt. Exit code %d (skipped).\n",
                         exit_no_gpu);
            return exit_no_gpu;
        }
        train(host, options);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "train_gpt_cuda: %s\n", e.what());
        return 2;
    }
}
