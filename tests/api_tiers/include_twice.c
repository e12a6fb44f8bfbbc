/* A unit that got ampx.h without the experimental tier (through some other
 * header, say) asks for it afterwards and gets it. */
#include "ampx/ampx.h"
#define AMPX_EXPERIMENTAL
#include "ampx/ampx.h"
#include "ampx/ampx.h" /* a third time: nothing is declared twice */

int main(void) {
  ampx_segment segment = AMPX_SEGMENT_INIT;
  (void)segment;
  return ampx_backward(NULL, NULL) == AMPX_ERR_INVALID_ARGUMENT ? 0 : 1;
}
