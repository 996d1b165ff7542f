// CUDA graphs per action: each (stage, F/B/I/W, micro-batch, rows) a backend computes is
// captured once and then replayed, so the host's cost of an action is its layers' host
// code and one graph launch instead of a launch per kernel and GEMM.
//
// An action's calls go through three phases (action_recording.hpp says how each works):
//   1. measuring: its first call runs eagerly. It warms cuBLASLt's algorithm cache, the
//      memory pool and the lazily loaded kernels, and counts the action's uploads, for which
//      the graph gets pinned buffers of its own.
//   2. capturing: its second call runs under stream capture into a graph, which is then
//      instantiated and launched.
//   3. replaying: each later call runs the layers' host code as a shadow that queues nothing
//      and checks it is the capture's twin, then launches the graph.
// An action that takes a matrix (F's input, B's and I's output gradient) gets it copied into
// a buffer of the graph's own first, outside the graph, and hands the layers a view of it:
// the graph reads that buffer's fixed address at every launch.
//
// What a graph allocates and hands on (F's output and activations) keeps its address for the
// graph's life, and must be freed before the graph launches again: a step frees every
// micro-batch's activations (W) and messages before the next, so it is. A shadow that
// differs from the capture throws before it launches anything (a weight buffer that moved,
// a new shape): the error names the action and the operation.
//
// Rules for what runs inside an action: stream work on the backend's stream only, no host
// waits (a synchronize would end the capture with CUDA's error), no communication, and
// buffers that keep their addresses from step to step. The engine's F, B, I and W are so at
// tensor-parallel degree 1 and ZeRO stages 0 and 1; train_gpt refuses --cuda-graphs
// elsewhere. Device-wide waits on other threads hold off while a graph is captured
// (capture_lock.hpp).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "weft/exec/action_key.hpp"
#include "weft/exec/cuda/action_recording.hpp"
#include "weft/exec/cuda/device_matrix.hpp"
#include "weft/exec/cuda/wait_limit.hpp"
#include "weft/gpu/capture_lock.hpp"
#include "weft/gpu/graph.hpp"
#include "weft/gpu/runtime.hpp"
#include "weft/gpu/stream.hpp"

namespace weft::exec::cuda_detail {

class action_graphs {
public:
    // Graphs of the actions queued on `stream`, which must be the stream this thread's device
    // matrices are allocated on (the backend's), so that their allocations become the graph's.
    explicit action_graphs(cudaStream_t stream) : stream_(stream) {
        require(stream != nullptr, "action_graphs: stream", "the legacy default stream",
                "must be a created stream (it cannot be captured)");
    }

    // Runs `action()` as action `key`'s current phase; returns what it returns.
    template <class Action>
    auto run(const exec::action_key& key, Action&& action, const wait_limit& limit) {
        require_usable();
        entry& e = find(key);
        auto call = [&] { return std::forward<Action>(action)(); };
        return run_phase(e, limit, call);
    }

    // Runs `action(view)` where `view` is a view of the graph's own copy of `input`.
    template <class Action>
    auto run(const exec::action_key& key, const device_matrix& input, Action&& action, const wait_limit& limit) {
        require_usable();
        entry& e = find(key);
        stage_input(e, input, stream_);
        auto call = [&] { return std::forward<Action>(action)(e.input.view()); };
        return run_phase(e, limit, call);
    }

    action_graphs(const action_graphs&) = delete;
    action_graphs& operator=(const action_graphs&) = delete;
    // A graph must not be destroyed while a launch of it runs: wait for the stream first.
    ~action_graphs() {
        if (!entries_.empty()) static_cast<void>(cudaStreamSynchronize(stream_));
    }

    // Drops the graphs of `stage`'s actions (all with nullopt): its runner is new (a layout
    // switch or a restart), and its buffers may have moved. Waits for their launches first.
    void forget(std::optional<int> stage, const wait_limit& limit) {
        const auto chosen = [stage](const auto& item) { return !stage || item.first.stage == *stage; };
        if (std::none_of(entries_.begin(), entries_.end(), chosen)) return;
        synchronize(stream_, limit, "a wait for the launches of action graphs that are dropped");
        std::erase_if(entries_, chosen);
    }

    [[nodiscard]] std::size_t graphs() const {
        std::size_t n = 0;
        for (const auto& [key, e] : entries_) n += e.captured.empty() ? 0 : 1;
        return n;
    }
    // Launches of captured graphs (captures included) since this object was made.
    [[nodiscard]] std::size_t launches() const { return launches_; }

private:
    struct pinned_buffer {
        void* host = nullptr;
        explicit pinned_buffer(std::size_t bytes) {
            const gpu::device_wide_scope no_capture;  // capture_lock.hpp
            gpu::check(cudaMallocHost(&host, bytes), "cudaMallocHost(" + std::to_string(bytes) + " bytes) for a graph");
        }
        pinned_buffer(const pinned_buffer&) = delete;
        pinned_buffer& operator=(const pinned_buffer&) = delete;
        pinned_buffer(pinned_buffer&& other) noexcept : host(std::exchange(other.host, nullptr)) {}
        pinned_buffer& operator=(pinned_buffer&&) = delete;
        ~pinned_buffer() {
            if (host != nullptr) gpu::free_pinned_memory(host);
        }
    };
    struct entry {
        explicit entry(std::string action) : recording(std::move(action)) {}
        action_recording recording;
        gpu::graph captured;                 // empty until the second call
        std::optional<gpu::event> launched;  // behind the last launch: its upload buffers may be rewritten after
        std::vector<pinned_buffer> uploads;
        device_matrix input;  // the graph's copy of the action's input (outside the graph)
        bool measured = false;  // its eager call done; `captured` says whether the capture is
    };

    // The action's matrices must be allocated on the captured stream to be the graph's; on
    // another stream (or with none: cudaMalloc) a capture would fail or miss them. And the
    // graphs must not have been left behind by a failure that could not wait for them.
    void require_usable() const {
        if (!broken_.empty())
            throw error("CUDA graphs per action: unusable since a failed action's graphs could not be dropped (" +
                        broken_ + ")");
        require(allocation_stream() == stream_, "action_graphs: this thread's allocation stream",
                allocation_stream() == nullptr ? "none" : "another stream",
                "must be the stream the graphs capture (the backend's: make the backend on this thread)");
    }

    entry& find(const exec::action_key& key) {
        auto it = entries_.find(key);
        if (it == entries_.end()) it = entries_.try_emplace(key, exec::to_string(key)).first;
        return it->second;
    }

    // Copies `input` into e.input (made at the first call, outside any graph), in stream order.
    static void stage_input(entry& e, const device_matrix& input, cudaStream_t stream) {
        if (e.input.rows() != input.rows() || e.input.cols() != input.cols()) {
            // Only before the capture: the graph reads e.input's address. The key holds the
            // rows, so a new shape here is a model that changed its width under the graph.
            require(e.captured.empty(), "CUDA graph of " + e.recording.action() + ": input shape",
                    std::to_string(input.rows()) + "x" + std::to_string(input.cols()),
                    "must stay " + std::to_string(e.input.rows()) + "x" + std::to_string(e.input.cols()) +
                        ", the captured one");
            e.input = device_matrix(input.rows(), input.cols());
        }
        if (input.size() > 0)
            gpu::check(cudaMemcpyAsync(e.input.data(), input.data(), input.size() * sizeof(device_matrix::value_type),
                                  cudaMemcpyDeviceToDevice, stream),
                  "cudaMemcpyAsync (an action's input into its graph's buffer)");
    }

    template <class Call>
    std::invoke_result_t<Call&> run_phase(entry& e, const wait_limit& limit, Call& call) {
        if (!e.measured) {
            // A measuring call that throws measured nothing: the next call measures again.
            const recording_scope scope(e.recording, recording_mode::measuring);
            if constexpr (std::is_void_v<std::invoke_result_t<Call&>>) {
                call();
                prepare_uploads(e);
                e.measured = true;
            } else {
                auto result = call();
                prepare_uploads(e);
                e.measured = true;
                return result;
            }
        } else if (e.captured.empty()) {
            return recorded(e, call, limit, [&](auto& body) {
                // No device-wide wait may run on another thread meanwhile (capture_lock.hpp).
                const gpu::device_wide_scope no_device_waits;
                e.captured = gpu::graph::capture(stream_, [&](cudaStream_t) {
                    const recording_scope scope(e.recording, recording_mode::capturing);
                    body();
                });
            });
        } else {
            // The shadow rewrites the graph's upload buffers: its last launch must have read them.
            if (!e.uploads.empty() && e.launched)
                synchronize(e.launched->get(), limit, "a wait for an action graph's last launch");
            return recorded(e, call, limit, [&](auto& body) {
                const recording_scope scope(e.recording, recording_mode::replaying);
                body();
            });
        }
    }

    void prepare_uploads(entry& e) {
        e.uploads.clear();
        std::vector<void*> buffers;
        for (const std::size_t bytes : e.recording.upload_bytes()) {
            e.uploads.emplace_back(bytes);
            buffers.push_back(e.uploads.back().host);
        }
        e.recording.set_upload_buffers(std::move(buffers));
    }

    // Runs `call` (and the recording's end check) inside `record` (a capture or a shadow),
    // then launches the graph. On an error nothing of the graph's runs: the memory the action
    // let go of from outside it is freed at once, the addresses the graph handed out are
    // abandoned (their owners' frees are skipped: action_recording::abandon), and the stage's
    // graphs are dropped, as frees they held may be lost with the capture; a later call of
    // these actions starts again from the eager call.
    template <class Call, class Record>
    std::invoke_result_t<Call&> recorded(entry& e, Call& call, const wait_limit& limit, Record&& record) {
        using result_type = std::invoke_result_t<Call&>;
        std::optional<std::conditional_t<std::is_void_v<result_type>, int, result_type>> result;
        try {
            auto body = [&] {
                if constexpr (std::is_void_v<result_type>)
                    call(), result.emplace(0);
                else
                    result.emplace(call());
                e.recording.finish();
            };
            record(body);
            e.captured.launch(stream_);
        } catch (...) {
            e.recording.abandon();
            free_deferred(e);
            const int stage = find_stage(e);
            try {
                forget(stage, limit);
            } catch (const std::exception& wait_failed) {
                // The first error is the one to report; the graphs left behind may still run.
                broken_ = wait_failed.what();
            }
            throw;
        }
        e.recording.launched();
        ++launches_;
        if (!e.launched) e.launched.emplace();
        e.launched->record(stream_);
        free_deferred(e);  // behind the launch in stream order
        if constexpr (!std::is_void_v<result_type>) return std::move(*result);
    }

    [[nodiscard]] int find_stage(const entry& e) const {
        for (const auto& [key, each] : entries_)
            if (&each == &e) return key.stage;
        return -1;
    }

    // Frees what the action let go of from outside the graph (a graph cannot free it).
    static void free_deferred(entry& e) noexcept {
        for (const auto& deferred : e.recording.take_deferred_frees()) {
            auto* on = static_cast<cudaStream_t>(deferred.stream);
            if (on != nullptr)
                static_cast<void>(cudaFreeAsync(deferred.pointer, on));
            else
                gpu::free_device_memory(deferred.pointer);
        }
    }

    cudaStream_t stream_;
    std::string broken_;  // why the graphs are unusable (a failure's wait that failed)
    std::map<exec::action_key, entry> entries_;
    std::size_t launches_ = 0;
};

}  // namespace weft::exec::cuda_detail
