// Compiled with -Wall -Wextra -pedantic -Werror as C++ to prove ampx.h is
// clean C++ as well as C99.
#include "ampx/ampx.h"

static_assert(sizeof(ampx_status) == 4, "ampx_status is a 32-bit enum");
