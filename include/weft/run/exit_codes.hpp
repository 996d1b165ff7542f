// The exit codes of every weft training program, in one table (docs/running.md shows the
// same table): scripts and schedulers branch on them, so each means one thing everywhere.
// `stopped` carries a code from the rank that decided to the process's exit.
#pragma once

#include <string>

#include "weft/core/error.hpp"

namespace weft::run::exit_code {

inline constexpr int done = 0;               // trained every step (or had none left to train)
inline constexpr int failed = 2;             // bad input (options, files, layouts) or a failure while running
inline constexpr int nonfinite = 3;          // a non-finite step stopped the run; it was not applied, nothing saved
inline constexpr int stopped_by_signal = 4;  // SIGTERM or SIGINT: stopped after a step, saved where configured
inline constexpr int no_gpu = 77;            // --device cuda without a GPU: what ctest reads as "skipped"

}  // namespace weft::run::exit_code

namespace weft::run {

// Ends a run on every rank at once, at the same point of training, with an exit code of the
// table above: the ranks agreed, so it is not one rank's failure and MPI is finalized, not
// aborted. Throw it only on a decision every rank makes.
class stopped : public weft::error {
public:
    stopped(const std::string& message, int exit_code) : weft::error(message), exit_code_(exit_code) {}
    [[nodiscard]] int exit_code() const { return exit_code_; }

private:
    int exit_code_;
};

}  // namespace weft::run
