// CPU kernels: indexing and data-movement ops (filled in by issue 9).
#include "backends/cpu/cpu_backend.h"

namespace mpc {

void RegisterCpuTensorKernels(KernelRegistry& r) {}

}  // namespace mpc
