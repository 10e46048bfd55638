// NumericsGuard (see numerics_guard.h).
#include "engine/numerics_guard.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace mpc {
namespace {

const char* NonFiniteName(double v) { return std::isnan(v) ? "NaN" : (v > 0 ? "+inf" : "-inf"); }

}  // namespace

absl::Status NumericsGuard::Check(const StepMetrics& m, double scale_after) {
  const std::string rerun =
      checking_ ? "" : " Rerun with --check-numerics to name the first op that produced a non-finite value.";
  if (!std::isfinite(m.loss) && spec_.stop_on_nonfinite_loss()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", m.step, ": the training loss is ", NonFiniteName(m.loss),
        "; stopping (numerics.stop_on_nonfinite_loss). ",
        m.skipped ? "This step's update was skipped (its gradients were not finite), so the weights are those of the "
                    "step before; "
                  : "",
        "nothing more is checkpointed or exported. Check the data and lower the learning rate.", rerun));
  }
  consecutive_skips_ = m.skipped ? consecutive_skips_ + 1 : 0;
  const int64_t limit = spec_.max_consecutive_skipped_steps();
  if (limit > 0 && consecutive_skips_ >= limit) {
    return absl::FailedPreconditionError(absl::StrCat(
        "steps ", m.step - consecutive_skips_ + 1, " to ", m.step, ": ", consecutive_skips_,
        " consecutive steps had non-finite gradients and were skipped (numerics.max_consecutive_skipped_steps ", limit,
        ")", dynamic_ ? absl::StrCat("; the loss scale is now ", scale_after) : "",
        ". The run is not learning: lower the learning rate, or check the data.", rerun));
  }
  const double floor = spec_.min_loss_scale();
  if (dynamic_ && floor > 0 && scale_after < floor) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", m.step, ": the dynamic loss scale fell to ", scale_after, ", below numerics.min_loss_scale ", floor,
        ": the gradients overflow f16 even unscaled, so the run has diverged. Lower the learning rate, or train in "
        "bf16 (--precision bf16), whose range is f32's.",
        rerun));
  }
  return absl::OkStatus();
}

}  // namespace mpc
