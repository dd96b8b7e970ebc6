// How long the multi-process tests wait for things, in one place. Each bound is a few times the
// longest duration measured for what it waits on (ctest durations on the 2-core CI machine,
// ctest -j2, docs in tests/README.md "Time bounds"), with a floor, so that a regression to
// "eventually" fails instead of passing slowly.
#pragma once

#include <chrono>

namespace fabric_lib::testing::bounds {

using namespace std::chrono_literals;

// One request, or one test's batch of requests, of the integration matrix completing: the
// longest measured is the 64 MiB write plus four smaller ones of SingleWritesOfEdgeSizesLandExactly
// on udp;ofi_rxd (about 1.5 s of its 3 s); the bursts of several thousand requests take < 2 s.
inline constexpr std::chrono::milliseconds kRequests = 10s;
// One agent command (hash of 66 MiB, expect, fill): < 0.3 s measured; an agent's start (an engine
// built, a region registered): < 0.5 s.
inline constexpr std::chrono::milliseconds kAgentCall = 10s;
// After a wait for n completions (or n imms): nothing more may arrive for this long. Late
// duplicates come within a few polls of the original (microseconds; the reordering wrapper holds
// an event for at most 4 polls), so 100 ms is thousands of polls.
inline constexpr std::chrono::milliseconds kQuiet = 100ms;

}  // namespace fabric_lib::testing::bounds
