// A CPU model of a GPU's stream ordering, so that CPU tests can hold the engine to the rules
// comm::nccl and exec::cuda impose without a GPU:
//
// * "Device" memory is the training state: what the backend's state memory allocates (here
//   host memory, registered in a table).
// * stream_ordered<Inner>'s operations on device memory work on a private copy; the result
//   reaches the caller's buffer only when the operation completes. request.wait() does not
//   complete it: like comm::nccl's wait(), it only orders the "compute stream" (a queue per
//   rank thread) after it. request.synchronize() completes it on the host. Blocking
//   collectives on device memory return once started, as NCCL's do.
// * Operations on host memory complete before they return, as comm::nccl's on host memory
//   (staged through the device) do.
// * stream_ordered_cpu is exec::cpu whose kernels run the queue first (they are ordered
//   after the waits before them), and whose synchronize() runs it (the host may read the
//   device's results after it).
//
// So code that reads the training state on the host after a stream-ordered wait, without
// synchronizing first, reads stale data here and gives different numbers, as it would on a
// GPU. Point-to-point messages pass straight through: the pipeline's activations are not
// training state, and only kernels read them.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "weft/comm/communicator.hpp"
#include "weft/comm/message_matching.hpp"
#include "weft/core/state_memory.hpp"
#include "weft/exec/cpu.hpp"

namespace weft_test {

namespace stream_model {

// The state memory's allocations: start address -> bytes. Shared by the rank threads.
struct device_table {
    std::mutex mutex;
    std::map<const std::byte*, std::size_t> allocations;
};
inline device_table& devices() {
    static device_table table;
    return table;
}

// Whether [p, p + bytes) lies in one allocation of the device state memory.
inline bool on_device(const void* p, std::size_t bytes) {
    if (p == nullptr || bytes == 0) return false;
    const auto* begin = static_cast<const std::byte*>(p);
    auto& table = devices();
    const std::scoped_lock lock(table.mutex);
    auto it = table.allocations.upper_bound(begin);
    if (it == table.allocations.begin()) return false;
    --it;
    return begin + bytes <= it->first + it->second;
}

// A completion waiting on a rank's compute stream: it writes `bytes` at `destination`.
struct queued_completion {
    const std::byte* destination = nullptr;
    std::size_t bytes = 0;
    std::function<void(bool write)> finish;
    bool orphaned = false;  // its destination was freed first: it must not write
};

// This rank thread's compute stream: the completions ordered on it and not yet run.
inline std::vector<std::shared_ptr<queued_completion>>& compute_stream() {
    static thread_local std::vector<std::shared_ptr<queued_completion>> pending;
    return pending;
}

// What the model backend hands a communicator as its compute stream (comm::nccl takes a
// cudaStream_t): one per rank thread, implicit, so the handle names nothing.
struct compute_stream_handle {};

// How many times this rank thread's backend synchronized (the host waited for its queue).
inline int& synchronizations() {
    static thread_local int count = 0;
    return count;
}

// How many completions found their destination freed (on a GPU: a collective writing into
// memory given back): a test expects none.
inline std::atomic<int>& writes_into_freed_memory() {
    static std::atomic<int> count{0};
    return count;
}

inline void* allocate(std::size_t bytes) {
    void* p = weft::detail::host_allocate(bytes);
    auto& table = devices();
    const std::scoped_lock lock(table.mutex);
    table.allocations[static_cast<const std::byte*>(p)] = bytes;
    return p;
}
inline void deallocate(void* p, std::size_t bytes) noexcept {
    const auto* begin = static_cast<const std::byte*>(p);
    for (auto& queued : compute_stream())
        if (!queued->orphaned && queued->destination >= begin && queued->destination < begin + bytes) {
            queued->orphaned = true;
            ++writes_into_freed_memory();
        }
    {
        auto& table = devices();
        const std::scoped_lock lock(table.mutex);
        table.allocations.erase(static_cast<const std::byte*>(p));
    }
    weft::detail::host_deallocate(p, bytes);
}

inline const weft::state_memory& device_state_memory() {
    static constexpr weft::state_memory memory{"stream-ordered device", &allocate, &deallocate, true};
    return memory;
}

// Buffers freed while completions queued before the free still wrote them, given back once
// the compute stream has run (drain).
inline std::vector<std::pair<void*, std::size_t>>& fenced_frees() {
    static thread_local std::vector<std::pair<void*, std::size_t>> fenced;
    return fenced;
}

// A device memory that frees after queued work, as exec::cuda's pool does with its fences:
// a buffer a queued completion still writes stays until the queue has run.
inline void deallocate_after_queued_work(void* p, std::size_t bytes) noexcept {
    const auto* begin = static_cast<const std::byte*>(p);
    bool in_use = false;
    for (const auto& queued : compute_stream())
        in_use = in_use || (!queued->orphaned && queued->destination >= begin && queued->destination < begin + bytes);
    if (in_use) {
        try {
            fenced_frees().emplace_back(p, bytes);
            return;
        } catch (...) {  // no room to defer it: free it the plain way (counted if that is wrong)
        }
    }
    deallocate(p, bytes);
}

inline const weft::state_memory& fencing_device_state_memory() {
    static constexpr weft::state_memory memory{.name = "stream-ordered device, fenced frees",
                                               .allocate = &allocate,
                                               .deallocate = &deallocate_after_queued_work,
                                               .pages_releasable = true,
                                               .frees_after_queued_work = true};
    return memory;
}

// Runs what the compute stream holds, in order: what a kernel launch or a host
// synchronization waits for. Then the buffers fenced behind it go.
inline void drain() {
    auto& pending = compute_stream();
    while (!pending.empty()) {
        auto due = std::move(pending);
        pending.clear();
        for (auto& queued : due) queued->finish(!queued->orphaned);
    }
    for (auto [p, bytes] : std::exchange(fenced_frees(), {})) deallocate(p, bytes);
}

}  // namespace stream_model

// JoinsCompute: whether it takes the backend's compute stream, as comm::nccl does
// (set_compute_stream), so that the engine starts collectives without a synchronize first.
// Its operations are ordered after the kernels before them either way (staged() drains the
// compute stream); without it the engine does not rely on that and waits first.
template <weft::communicator Inner, bool JoinsCompute = true>
class stream_ordered {
    // One operation on a private copy: completing it waits for the inner operation and
    // copies the copy's result to where the caller wants it.
    struct operation {
        typename Inner::request inner;
        std::vector<std::byte> input;   // a device input, copied when the operation started
        std::vector<std::byte> output;  // a device result, until it is complete
        void* destination = nullptr;
        bool complete = false;
        void finish(bool write = true) {
            if (complete) return;
            complete = true;
            inner.wait();
            if (write && destination != nullptr && !output.empty())
                std::memcpy(destination, output.data(), output.size());
        }
    };

public:
    using memory_space = typename Inner::memory_space;
    static constexpr weft::comm::message_matching matching = weft::comm::matching_of<Inner>;

    class request {
    public:
        request() = default;
        request(request&&) noexcept = default;
        request& operator=(request&&) noexcept = default;
        request(const request&) = delete;
        request& operator=(const request&) = delete;
        ~request() = default;

        // Stream-ordered on device memory: the next kernel or synchronize() of this rank
        // completes it. Point to point: completes it now.
        void wait() {
            if (!op_ || op_->complete || queued_) return;
            if (!stream_ordered_) return op_->finish();
            queued_ = true;
            stream_model::compute_stream().push_back(std::make_shared<stream_model::queued_completion>(
                stream_model::queued_completion{static_cast<const std::byte*>(op_->destination), op_->output.size(),
                                                [op = op_](bool write) { op->finish(write); }}));
        }
        // Completes it now, on the host.
        void synchronize() {
            if (op_) op_->finish();
        }

    private:
        friend class stream_ordered;
        request(std::shared_ptr<operation> op, bool stream_ordered)
            : op_(std::move(op)), stream_ordered_(stream_ordered) {}
        std::shared_ptr<operation> op_;
        bool stream_ordered_ = false;
        bool queued_ = false;
    };

    explicit stream_ordered(Inner inner) : inner_(std::move(inner)) {}

    // comm::nccl's: orders its operations after the backend's stream (here, always).
    void set_compute_stream(stream_model::compute_stream_handle)
        requires JoinsCompute
    {}

    [[nodiscard]] int rank() const { return inner_.rank(); }
    [[nodiscard]] int size() const { return inner_.size(); }

    [[nodiscard]] request isend(std::span<const std::byte> data, int dest, int tag) {
        return passed_through(inner_.isend(data, dest, tag));
    }
    [[nodiscard]] request irecv(std::span<std::byte> buffer, int source, int tag) {
        return passed_through(inner_.irecv(buffer, source, tag));
    }
    // Where the inner communicator batches sends and receives (rendezvous_comm.hpp).
    void flush()
        requires requires(Inner& i) { i.flush(); }
    {
        inner_.flush();
    }

    template <class T>
    [[nodiscard]] request iallreduce_sum(std::span<T> values) {
        auto op = staged(std::span<const T>(values), values);
        op->inner = inner_.iallreduce_sum(typed<T>(op->output));
        return settle(std::move(op));
    }
    template <class T>
    [[nodiscard]] request iallgather(std::span<const T> mine, std::span<T> all) {
        auto op = staged(mine, all);
        op->inner = inner_.iallgather(input_of(op, mine), output_of(op, all));
        return settle(std::move(op));
    }
    template <class T>
    [[nodiscard]] request ireduce_scatter_sum(std::span<const T> all, std::span<T> mine) {
        auto op = staged(all, mine);
        op->inner = inner_.ireduce_scatter_sum(input_of(op, all), output_of(op, mine));
        return settle(std::move(op));
    }

    // Started, and ordered on the compute stream: as NCCL's blocking collectives.
    template <class T>
    void allreduce_sum(std::span<T> values) {
        iallreduce_sum(values).wait();
    }
    template <class T>
    void allgather(std::span<const T> mine, std::span<T> all) {
        iallgather(mine, all).wait();
    }
    template <class T>
    void reduce_scatter_sum(std::span<const T> all, std::span<T> mine) {
        ireduce_scatter_sum(all, mine).wait();
    }
    void broadcast(std::span<std::byte> bytes, int root) {
        stream_model::drain();  // the inner broadcast runs now: what it reads first
        inner_.broadcast(bytes, root);
    }
    void barrier() { inner_.barrier(); }

    [[nodiscard]] stream_ordered split(int color, int key) { return stream_ordered(inner_.split(color, key)); }

private:
    template <class T>
    static std::span<T> typed(std::vector<std::byte>& bytes) {
        return {reinterpret_cast<T*>(bytes.data()), bytes.size() / sizeof(T)};
    }

    static request passed_through(typename Inner::request inner) {
        auto op = std::make_shared<operation>();
        op->inner = std::move(inner);
        return request(std::move(op), false);
    }

    // An operation whose device input is read now (as the comm stream, ordered after the
    // compute stream, would read it) and whose device output is held back.
    template <class T>
    std::shared_ptr<operation> staged(std::span<const T> in, std::span<T> out) {
        stream_model::drain();  // the communication is ordered after the kernels before it
        auto op = std::make_shared<operation>();
        op->input.resize(in.size_bytes());
        if (!in.empty()) std::memcpy(op->input.data(), in.data(), in.size_bytes());
        op->output.resize(out.size_bytes());
        if (!out.empty()) std::memcpy(op->output.data(), out.data(), out.size_bytes());
        op->destination = out.data();
        return op;
    }
    template <class T>
    static std::span<const T> input_of(const std::shared_ptr<operation>& op, std::span<const T>) {
        return typed<const T>(op->input);
    }
    template <class T>
    static std::span<T> output_of(const std::shared_ptr<operation>& op, std::span<T>) {
        return typed<T>(op->output);
    }

    // An operation whose result is host memory completes now, as comm::nccl's staged ones.
    static request settle(std::shared_ptr<operation> op) {
        if (!stream_model::on_device(op->destination, op->output.size())) op->finish();
        return request(std::move(op), true);
    }

    Inner inner_;
};

// exec::cpu on the model's stream: every kernel first runs the completions queued before it.
struct stream_ordered_cpu : weft::exec::cpu {
    static constexpr std::string_view name = "stream_ordered_cpu";

    [[nodiscard]] const weft::state_memory& state_memory() const { return stream_model::device_state_memory(); }
    [[nodiscard]] stream_model::compute_stream_handle stream() const { return {}; }
    void synchronize() const {
        ++stream_model::synchronizations();
        stream_model::drain();
        weft::exec::cpu::synchronize();
    }

#define WEFT_TEST_AFTER_STREAM(kernel)                             \
    template <class... Args>                                       \
    decltype(auto) kernel(Args&&... args) {                        \
        stream_model::drain();                                     \
        return weft::exec::cpu::kernel(std::forward<Args>(args)...); \
    }
    WEFT_TEST_AFTER_STREAM(add)
    WEFT_TEST_AFTER_STREAM(linear_forward)
    WEFT_TEST_AFTER_STREAM(linear_gelu_forward)
    WEFT_TEST_AFTER_STREAM(linear_backward_input)
    WEFT_TEST_AFTER_STREAM(linear_backward_input_gelu)
    WEFT_TEST_AFTER_STREAM(linear_backward_weight)
    WEFT_TEST_AFTER_STREAM(transposed_linear_forward)
    WEFT_TEST_AFTER_STREAM(transposed_linear_backward_input)
    WEFT_TEST_AFTER_STREAM(transposed_linear_backward_weight)
    WEFT_TEST_AFTER_STREAM(gelu_forward)
    WEFT_TEST_AFTER_STREAM(gelu_backward)
    WEFT_TEST_AFTER_STREAM(layer_norm_forward)
    WEFT_TEST_AFTER_STREAM(residual_layer_norm_forward)
    WEFT_TEST_AFTER_STREAM(layer_norm_backward_input)
    WEFT_TEST_AFTER_STREAM(layer_norm_backward_weight)
    WEFT_TEST_AFTER_STREAM(cross_entropy)
    WEFT_TEST_AFTER_STREAM(embedding_forward)
    WEFT_TEST_AFTER_STREAM(embedding_backward_weight)
    WEFT_TEST_AFTER_STREAM(vocab_parallel_embedding_forward)
    WEFT_TEST_AFTER_STREAM(vocab_parallel_embedding_backward_weight)
    WEFT_TEST_AFTER_STREAM(causal_attention_forward)
    WEFT_TEST_AFTER_STREAM(causal_attention_backward)
    WEFT_TEST_AFTER_STREAM(row_max)
    WEFT_TEST_AFTER_STREAM(softmax_partial_sums)
    WEFT_TEST_AFTER_STREAM(softmax_gradient)
    WEFT_TEST_AFTER_STREAM(vocab_parallel_cross_entropy)
    WEFT_TEST_AFTER_STREAM(scale)
    WEFT_TEST_AFTER_STREAM(adamw_update)
    WEFT_TEST_AFTER_STREAM(sgd_update)
    WEFT_TEST_AFTER_STREAM(summarize_gradients)
    WEFT_TEST_AFTER_STREAM(copy_to_host)
    WEFT_TEST_AFTER_STREAM(copy_from_host)
#undef WEFT_TEST_AFTER_STREAM
};

// The same over a state memory that frees after queued work (exec::cuda's, whose pool fences
// a freed buffer): the engine need not wait for it before freeing what queued work uses.
struct stream_ordered_cpu_fencing_frees : stream_ordered_cpu {
    static constexpr std::string_view name = "stream_ordered_cpu_fencing_frees";
    [[nodiscard]] const weft::state_memory& state_memory() const {
        return stream_model::fencing_device_state_memory();
    }
};

}  // namespace weft_test
