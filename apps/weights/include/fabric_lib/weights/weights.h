// Umbrella header of the RL weight transfer app (fabric_lib_weights).
#pragma once

#include "fabric_lib/weights/codec.h"
#include "fabric_lib/weights/controller.h"
#include "fabric_lib/weights/fp8.h"
#include "fabric_lib/weights/imm_values.h"
#include "fabric_lib/weights/inference.h"
#include "fabric_lib/weights/layout.h"
#include "fabric_lib/weights/plan.h"
#include "fabric_lib/weights/prepare.h"
#include "fabric_lib/weights/trainer.h"
#include "fabric_lib/weights/types.h"
