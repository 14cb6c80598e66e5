#pragma once
// Umbrella header: communicators.
#include "dpl/comm/agreement.hpp"
#include "dpl/comm/communicator.hpp"
