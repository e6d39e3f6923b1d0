// The attention operators' TuningProblems, for the launch files that include this header by its
// old name; new code includes runtime/ops/<op>_tuning.h (what all share: tuning_support.h).
#pragma once

#include "ops/attention_tuning.h"
