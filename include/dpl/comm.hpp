#pragma once
// Umbrella header: communicators.
#include "dpl/comm/communicator.hpp"
