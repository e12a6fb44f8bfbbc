/* Ignores a status: -Werror=unused-result refuses it unless the program
 * opted out with -DAMPX_NODISCARD= (the control). */
#include "ampx/ampx.h"

int main(void) {
  ampx_context_synchronize(NULL);
  return 0;
}
