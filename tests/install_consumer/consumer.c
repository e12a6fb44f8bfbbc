/* Links an installed libampx and checks that the header and the library
 * agree on the version. */
#include <stdio.h>

#include "ampx/ampx.h"

int main(void) {
  ampx_context ctx = NULL;
  if (ampx_version() != AMPX_VERSION_NUMBER) {
    fprintf(stderr, "header %d but library %u\n", AMPX_VERSION_NUMBER, ampx_version());
    return 1;
  }
  if (ampx_context_create(NULL, &ctx) != AMPX_OK) {
    fprintf(stderr, "%s\n", ampx_last_error());
    return 1;
  }
  ampx_context_release(ctx);
  printf("installed ampx %s works\n", ampx_version_string());
  return 0;
}
