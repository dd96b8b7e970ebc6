// The target side of fabric-bench: owns the written-to regions, its engine(s) and the raw
// baseline's endpoints, and answers the initiator's text commands. Every reply is "ok [words]"
// or "error <text>".
//
// Protocol (one command per message, words separated by spaces):
//   setup <provider> <domains> <interface|-> <spin>   (re)build the engine and raw endpoints -> ok <provider>
//   region <bytes>                    new zeroed region, registered on both -> ok <desc hex> <raw region>
//   clear <bytes>                     zero the first bytes of the region
//   wait <imm> <n>                    wait until the engine counted n imms of that value (consumes them;
//                                     any extra arrival is an error)
//   check <imm> <n> <bytes> <hash>    wait, then compare the hash of the region's first bytes
//   raw_start | raw_stop              run / stop the thread that polls the raw endpoints' CQs
//   raw_wait <imm> <n>, raw_check <imm> <n> <bytes> <hash>   the same for the raw endpoints
//   peers <count> <bytes>             (re)build `count` extra engines with a region each -> ok <desc hex>...
//   peer_clear <count> <bytes>, peer_check <i> <imm> <n> <bytes> <hash|->
//   echo <ping> <pong> <desc hex>     answer every arriving <ping> imm with a <pong> imm to desc
//   echo_end <ping> <n>               stop answering; ok when exactly n pings arrived
//   bye                               ok, then exit
#pragma once

#include <string>

#include "common/control_channel.h"

namespace fabric_lib::bench {

// Serves one initiator until "bye" or until the channel closes. `interface_override` (non-empty)
// replaces the interface the initiator asks for (two hosts name their NICs differently).
// Returns the process exit code.
int serve_target(tools::ControlChannel channel, const std::string& interface_override);

}  // namespace fabric_lib::bench
