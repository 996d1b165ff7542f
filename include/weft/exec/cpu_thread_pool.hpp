// The threads one rank's CPU kernels share (--threads): a fork-join pool that splits a range of
// independent pieces into one contiguous part per thread, the calling thread taking the first.
//
// Why a pool of weft's own rather than OpenMP or Eigen's threading: the parts are fixed by the
// range and the thread count alone, so each kernel can be split where its results stay what one
// thread computes (whole rows, whole columns, whole attention heads); no OpenMP runtime is
// imposed on a program that includes weft, and ThreadSanitizer sees every synchronisation.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "weft/core/error.hpp"

namespace weft::exec {

class cpu_thread_pool {
public:
    // The most threads one rank may ask for: beyond the cores of any machine weft runs on.
    static constexpr int max_threads = 1024;

    explicit cpu_thread_pool(int threads) : threads_(threads) {
        require(threads >= 1 && threads <= max_threads, "--threads", threads,
                "must be an integer in [1, " + std::to_string(max_threads) + "]");
        workers_.reserve(std::size_t(threads - 1));
        for (int w = 1; w < threads; ++w) workers_.emplace_back([this, w] { work(w); });
    }
    cpu_thread_pool(const cpu_thread_pool&) = delete;
    cpu_thread_pool& operator=(const cpu_thread_pool&) = delete;
    ~cpu_thread_pool() {
        {
            std::lock_guard hold(lock_);
            stopping_ = true;
        }
        wake_.notify_all();
        for (auto& worker : workers_) worker.join();
    }

    [[nodiscard]] int threads() const { return threads_; }

    // Calls piece(begin, end) on disjoint parts that cover [0, count), one per thread (fewer
    // where count is small: no part is smaller than `grain`), and returns when all are done.
    // The parts depend only on count, grain and threads(). An exception from any part is
    // rethrown here after every part has finished. Callers on several threads take turns (one
    // job at a time); a part must not call for_parts on the same pool.
    void for_parts(std::size_t count, std::size_t grain,
                   const std::function<void(std::size_t, std::size_t)>& piece) {
        const std::size_t parts = parts_for(count, grain);
        if (parts <= 1) {
            if (count > 0) piece(0, count);
            return;
        }
        const std::lock_guard one_job(job_lock_);
        {
            std::lock_guard hold(lock_);
            job_ = &piece;
            count_ = count;
            parts_ = parts;
            pending_.store(parts - 1, std::memory_order_relaxed);
            error_ = nullptr;
            generation_.fetch_add(1, std::memory_order_release);
        }
        wake_.notify_all();
        run_part(0);
        // The other parts end about when this one does: spin a little before sleeping.
        for (int spin = 0; spin < spin_rounds && pending_.load(std::memory_order_acquire) != 0; ++spin) pause();
        std::unique_lock hold(lock_);
        done_.wait(hold, [&] { return pending_.load(std::memory_order_acquire) == 0; });
        job_ = nullptr;
        if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    }

    // How many parts for_parts makes of `count` pieces.
    [[nodiscard]] std::size_t parts_for(std::size_t count, std::size_t grain) const {
        const std::size_t by_grain = count / std::max<std::size_t>(grain, 1);
        return std::max<std::size_t>(1, std::min<std::size_t>(std::size_t(threads_), by_grain));
    }

private:
    // Part p of count_ pieces in parts_ parts: the first count_ % parts_ parts hold one more.
    void run_part(std::size_t p) {
        const std::size_t base = count_ / parts_, extra = count_ % parts_;
        const std::size_t begin = p * base + std::min(p, extra);
        const std::size_t end = begin + base + (p < extra ? 1 : 0);
        try {
            (*job_)(begin, end);
        } catch (...) {
            std::lock_guard hold(lock_);
            if (!error_) error_ = std::current_exception();
        }
    }

    // A kernel's next one follows within microseconds, and a sleeping thread takes tens of them
    // to wake: a worker spins this many rounds for the next job before it sleeps (as OpenMP's
    // runtimes do), and the caller as many for the last part to end.
    static constexpr int spin_rounds = 20000;
    static void pause() {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#else
        std::this_thread::yield();
#endif
    }

    void work(int worker) {
        std::size_t seen = 0;
        for (;;) {
            for (int spin = 0; spin < spin_rounds && generation_.load(std::memory_order_acquire) == seen; ++spin)
                pause();
            {
                std::unique_lock hold(lock_);
                wake_.wait(hold, [&] { return stopping_ || generation_.load(std::memory_order_relaxed) != seen; });
                if (stopping_) return;
                seen = generation_.load(std::memory_order_relaxed);
                if (std::size_t(worker) >= parts_) continue;  // a small job: this thread sits it out
            }
            run_part(std::size_t(worker));
            if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
                std::lock_guard hold(lock_);  // so that the caller cannot miss the notification
                done_.notify_one();
            }
        }
    }

    int threads_;
    std::vector<std::thread> workers_;
    std::mutex job_lock_;  // held by the caller for the whole of one job
    std::mutex lock_;
    std::condition_variable wake_, done_;
    bool stopping_ = false;
    std::atomic<std::size_t> generation_{0};
    const std::function<void(std::size_t, std::size_t)>* job_ = nullptr;  // with count_ and parts_: under lock_
    std::size_t count_ = 0, parts_ = 0;
    std::atomic<std::size_t> pending_{0};  // parts still running on workers
    std::exception_ptr error_;
};

}  // namespace weft::exec
