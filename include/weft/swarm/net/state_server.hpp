// Handing out a SWARM stage's state image (swarm/stage_service.hpp: parameters, then each
// optimizer tensor) to whoever fetches it: a joining worker, or the trainer saving a
// checkpoint. A worker serves its own stage; the trainer, resuming from a checkpoint, serves
// every stage from the checkpoint's images.
//
// A request for the manifest (count 0) takes a snapshot of the state (one copy, kept until a
// later step's request replaces it, or until nobody asked for `idle_seconds`), so that the
// chunks asked for next are all of that step while the stage trains on. A request that
// cannot be served (another stage, a step no longer held, a range outside the image) gets a
// refusal, never an error: the fetching side does without this source.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "weft/core/error.hpp"
#include "weft/swarm/protocol.hpp"
#include "weft/swarm/stage_service.hpp"
#include "weft/swarm/wire.hpp"

namespace weft::swarm::net {

// A state request as it travels: the stage, the step whose snapshot the chunk is of, and the
// range of the image (count 0: the manifest, which takes the snapshot).
struct state_request {
    std::int32_t stage = 0;
    std::uint64_t step = 0, offset = 0, count = 0;
};

[[nodiscard]] inline std::vector<std::byte> write_state_request(const state_request& q) {
    message_writer w(message_kind::state_request);
    w.put(q.stage).put(q.step).put(q.offset).put(q.count);
    return w.take();
}
[[nodiscard]] inline state_request read_state_request(message_reader& r) {
    state_request q;
    q.stage = r.get<std::int32_t>("stage");
    q.step = r.get<std::uint64_t>("step");
    q.offset = r.get<std::uint64_t>("offset");
    q.count = r.get<std::uint64_t>("count");
    r.finish();
    return q;
}

// A refusal, with the step the refusing side holds and why.
[[nodiscard]] inline std::vector<std::byte> refusal(std::uint64_t step, const std::string& why) {
    message_writer w(message_kind::refused);
    w.put(std::uint64_t{0}).put(step).put_string(why);
    return w.take();
}

class state_image_server {
public:
    explicit state_image_server(double idle_seconds = 20) : idle_seconds_(idle_seconds) {}

    // The reply to `q` from `service` (the stage it serves).
    [[nodiscard]] std::vector<std::byte> answer(const stage_service& service, const state_request& q) {
        try {
            if (q.stage != service.stage())
                throw invalid_argument("state request stage", q.stage,
                                       "this side serves stage " + std::to_string(service.stage()));
            message_writer w(message_kind::state_reply);
            if (q.count == 0) {
                if (!snapshot_ || snapshot_->manifest.step != service.step()) {
                    const state_manifest now = service.manifest();
                    snapshot_ = snapshot{now, service.read_state(0, now.total())};
                }
                write(w, snapshot_->manifest);
            } else {
                if (!snapshot_ || snapshot_->manifest.step != q.step)
                    throw invalid_argument("state request step", q.step,
                                           "the snapshot here is of step " +
                                               (snapshot_ ? std::to_string(snapshot_->manifest.step) : "none"));
                const auto& image = snapshot_->image;
                require(q.count <= image.size() && q.offset <= image.size() - q.count, "state chunk offset", q.offset,
                        "with " + std::to_string(q.count) + " values must lie within the state's " +
                            std::to_string(image.size()) + " values");
                w.put(q.step).put(q.offset).put_floats(std::span<const float>(image).subspan(q.offset, q.count));
            }
            used_ = clock::now();
            ++served_;
            return w.take();
        } catch (const error& e) {
            return refusal(service.step(), e.what());
        }
    }
    // Lets the snapshot go when nobody asked for it for a while: it is a copy of the state.
    void forget_if_idle() {
        if (snapshot_ && clock::now() - used_ > std::chrono::duration<double>(idle_seconds_)) snapshot_.reset();
    }
    void forget() { snapshot_.reset(); }
    // Requests answered with state (not refused).
    [[nodiscard]] long long served() const { return served_; }

private:
    using clock = std::chrono::steady_clock;
    struct snapshot {
        state_manifest manifest;
        std::vector<float> image;
    };
    double idle_seconds_;
    std::optional<snapshot> snapshot_;
    clock::time_point used_{};
    long long served_ = 0;
};

}  // namespace weft::swarm::net
