// checkpoint_file.h -- training checkpoint files: tensors, optimizer state
// and loss-scaler state in one checksummed file that is replaced atomically.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"

namespace ampx::impl {

class Fp8Recipe;
class FusedOptimizer;
class LossScaler;

namespace io {

// Writes a temporary file next to `path` and renames it over `path`, so a
// crash at any instant leaves either the old file or the new one. A failure
// removes the temporary file and leaves `path` as it was. `optimizer` and
// `scaler` may be null, and so may `recipe` (an FP8 recipe's options and
// slots). Both calls are refused (AMPX_ERR_ORDER) between an unscale/step
// and the scaler's update.
void save_checkpoint_file(const std::string& path, const std::vector<DeviceTensor*>& tensors,
                          FusedOptimizer* optimizer, LossScaler* scaler,
                          Fp8Recipe* recipe = nullptr);

// Reads and validates the whole file against the live objects before it
// changes any of them. A null optimizer, scaler or recipe skips that part
// of the file; one given that the file lacks is refused. A recipe's saved
// slots go to its live slots of the same names (unnamed ones in order), or
// are added as restored slots (Fp8Recipe::add_restored_slot).
void load_checkpoint_file(const std::string& path, const std::vector<DeviceTensor*>& tensors,
                          FusedOptimizer* optimizer, LossScaler* scaler,
                          Fp8Recipe* recipe = nullptr);

}  // namespace io
}  // namespace ampx::impl
