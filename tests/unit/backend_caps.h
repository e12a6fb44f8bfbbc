// backend_caps.h -- the capabilities of a backend under test, as the tests
// call its primitives directly (Backend::require, backend.h): a backend
// that lacks one throws AMPX_ERR_NOT_SUPPORTED, which the cases that probe
// for a primitive report as "not available".
#pragma once

#include <memory>

#include "core/backend.h"
#include "core/backend_amp.h"
#include "core/backend_gemm.h"
#include "core/backend_nn.h"

namespace ampx_test {

inline ampx::impl::Backend& backend_of(ampx::impl::Backend& b) { return b; }
inline ampx::impl::Backend& backend_of(ampx::impl::Backend* b) { return *b; }
inline ampx::impl::Backend& backend_of(const std::unique_ptr<ampx::impl::Backend>& b) { return *b; }
// Test rigs that hold a backend and hand it out through operator->.
template <class Rig>
auto backend_of(Rig& rig) -> decltype(*rig.operator->()) {
  return *rig.operator->();
}

template <class B>
ampx::impl::AmpPrimitives& amp_of(B&& b) {
  return backend_of(b).template require<ampx::impl::AmpPrimitives>("the test");
}
template <class B>
ampx::impl::NnPrimitives& nn_of(B&& b) {
  return backend_of(b).template require<ampx::impl::NnPrimitives>("the test");
}
template <class B>
ampx::impl::GemmPrimitives& gemm_of(B&& b) {
  return backend_of(b).template require<ampx::impl::GemmPrimitives>("the test");
}

}  // namespace ampx_test
