// Umbrella header: everything a user of fabric-lib needs.
#pragma once

#include "fabric_lib/completion.h"
#include "fabric_lib/domain_address.h"
#include "fabric_lib/imm_counter.h"
#include "fabric_lib/memory.h"
#include "fabric_lib/requests.h"
#include "fabric_lib/status.h"
#include "fabric_lib/topology.h"
#include "fabric_lib/transfer_engine.h"
#include "fabric_lib/uvm_watcher.h"
