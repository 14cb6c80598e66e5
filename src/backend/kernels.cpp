// Defines the kernel stubs declared in kernels.hpp (each empty until a backend registers).
#define DPL_DEFINE_KERNELS
#include "backend/kernels.hpp"
