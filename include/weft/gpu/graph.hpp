// Records the work a callable enqueues on a stream into a CUDA graph, once, and
// replays it with one launch: a whole training step costs one CPU call per step.
// Everything enqueued must be capturable (no synchronous copies, no allocation).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "weft/gpu/runtime.hpp"

namespace weft::gpu {

class graph {
public:
    graph() = default;

    // Captures everything `enqueue(stream)` puts on `stream` (which must not be the
    // legacy default stream). Nothing runs during capture; launch() runs it.
    template <class Enqueue>
    static graph capture(cudaStream_t stream, Enqueue&& enqueue) {
        require(stream != nullptr, "graph::capture: stream", "the default stream",
                "must be a created stream (capture of the legacy default stream is not allowed)");
        check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
        cudaGraph_t captured = nullptr;
        try {
            std::forward<Enqueue>(enqueue)(stream);
        } catch (...) {
            // End the capture so the stream is usable again, then report the first error.
            static_cast<void>(cudaStreamEndCapture(stream, &captured));
            if (captured != nullptr) static_cast<void>(cudaGraphDestroy(captured));
            throw;
        }
        check(cudaStreamEndCapture(stream, &captured), "cudaStreamEndCapture");
        graph result;
        result.graph_ = captured;
        check(cudaGraphInstantiate(&result.exec_, captured, 0), "cudaGraphInstantiate");
        return result;
    }

    graph(const graph&) = delete;
    graph& operator=(const graph&) = delete;
    graph(graph&& other) noexcept
        : graph_(std::exchange(other.graph_, nullptr)), exec_(std::exchange(other.exec_, nullptr)) {}
    graph& operator=(graph&& other) noexcept {
        if (this != &other) {
            release();
            graph_ = std::exchange(other.graph_, nullptr);
            exec_ = std::exchange(other.exec_, nullptr);
        }
        return *this;
    }
    ~graph() { release(); }

    [[nodiscard]] bool empty() const { return exec_ == nullptr; }

    void launch(cudaStream_t stream) const {
        require(exec_ != nullptr, "graph::launch: graph", "empty", "must come from graph::capture");
        check(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
    }

    [[nodiscard]] std::size_t node_count() const {
        std::size_t count = 0;
        if (graph_ != nullptr) check(cudaGraphGetNodes(graph_, nullptr, &count), "cudaGraphGetNodes");
        return count;
    }

private:
    void release() noexcept {
        if (exec_ != nullptr) static_cast<void>(cudaGraphExecDestroy(exec_));
        if (graph_ != nullptr) static_cast<void>(cudaGraphDestroy(graph_));
        exec_ = nullptr;
        graph_ = nullptr;
    }
    cudaGraph_t graph_ = nullptr;
    cudaGraphExec_t exec_ = nullptr;
};

}  // namespace weft::gpu
