#pragma once
// Umbrella header: phase timers and their summaries.
#include "dpl/profile/phase_timer.hpp"
