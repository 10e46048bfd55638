// CPU kernels: convolution and pooling ops (filled in by issue 9).
#include "backends/cpu/cpu_backend.h"

namespace mpc {

void RegisterCpuConvKernels(KernelRegistry& r) {}

}  // namespace mpc
