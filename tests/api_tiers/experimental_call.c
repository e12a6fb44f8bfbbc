/* Calls an experimental function: compiles only with AMPX_EXPERIMENTAL. */
#include "ampx/ampx.h"

int main(void) {
  return ampx_backward(NULL, NULL) == AMPX_ERR_INVALID_ARGUMENT ? 0 : 1;
}
