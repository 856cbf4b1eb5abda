// Moved to train/training_state.h (the trainer's components assemble it; checkpoint/ only writes
// and reads it). This forwarding header remains only for includers outside train/ and checkpoint/.
#pragma once

#include "finetune/train/training_state.h"
