/* Calls the deprecated ampx_checkpoint (-Werror=deprecated-declarations
 * refuses it); with -DUSE_REPLACEMENT, its replacement (the control). */
#define AMPX_EXPERIMENTAL
#include "ampx/ampx.h"

int main(void) {
  ampx_tensor out = NULL;
#ifdef USE_REPLACEMENT
  ampx_segment segment = AMPX_SEGMENT_INIT;
  return ampx_checkpoint_segment(NULL, &segment, NULL, 0, &out, 1) == AMPX_OK;
#else
  return ampx_checkpoint(NULL, NULL, NULL, NULL, 0, &out, 1) == AMPX_OK;
#endif
}
