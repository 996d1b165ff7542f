// Worker processes a program starts on this machine (swarm_train --spawn): each is started
// from the program's own executable with its arguments, stopped at the end, and any left is
// killed, so no worker outlives the run, even when the program fails.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <utility>
#include <string>
#include <thread>
#include <vector>

#include "weft/core/error.hpp"

extern char** environ;

namespace weft::run {

class child_processes {
public:
    // `name`: the children's argv[0], what `ps` shows of their command line (empty: `program`).
    explicit child_processes(std::string program, std::string name = {})
        : program_(std::move(program)), name_(name.empty() ? program_ : std::move(name)) {}
    child_processes(const child_processes&) = delete;
    child_processes& operator=(const child_processes&) = delete;
    ~child_processes() { reap(std::chrono::seconds(0)); }

    // Starts `program arguments...` as the child known as `id`.
    void start(long long id, const std::vector<std::string>& arguments) {
        std::vector<std::string> args{name_};
        args.insert(args.end(), arguments.begin(), arguments.end());
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        pid_t pid = 0;
        if (const int failure = posix_spawn(&pid, program_.c_str(), nullptr, nullptr, argv.data(), environ); failure != 0)
            throw error("cannot start a process from " + program_ + ": " + std::strerror(failure));
        pids_[id] = pid;
    }
    // Waits up to `grace` for the children to exit, then kills the rest; returns how many
    // had to be killed.
    int reap(std::chrono::milliseconds grace) {
        const auto deadline = std::chrono::steady_clock::now() + grace;
        int killed = 0;
        for (auto& [id, pid] : pids_) {
            while (pid > 0) {
                int status = 0;
                const pid_t done = ::waitpid(pid, &status, WNOHANG);
                if (done == pid || done < 0) {
                    pid = 0;
                    break;
                }
                if (std::chrono::steady_clock::now() >= deadline) {
                    ::kill(pid, SIGKILL);
                    ::waitpid(pid, &status, 0);
                    ++killed;
                    pid = 0;
                    break;
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
        }
        return killed;
    }
    [[nodiscard]] std::map<long long, pid_t> pids() const { return pids_; }

private:
    std::string program_;
    std::string name_;
    std::map<long long, pid_t> pids_;
};

}  // namespace weft::run
