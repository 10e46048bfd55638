// Bulk f32 <-> OCP FP8 conversions. The per-element functions are inline in float8.h;
// these loops exist so callers converting whole buffers get one vectorisable loop per
// format instead of writing their own.
#include "graph/float8.h"

namespace mpc {

void FloatToF8E4M3(const float* in, uint8_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToF8E4M3(in[i]);
}

void FloatToF8E5M2(const float* in, uint8_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToF8E5M2(in[i]);
}

void F8E4M3ToFloat(const uint8_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = F8E4M3ToFloat(in[i]);
}

void F8E5M2ToFloat(const uint8_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = F8E5M2ToFloat(in[i]);
}

}  // namespace mpc
