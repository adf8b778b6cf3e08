/* pagedattn.h alone, as C11 with -Wall -Wextra -pedantic -Werror. */
#include "pagedattn/pagedattn.h"

int main(void) {
  pa_tensor_desc inputs[PA_NUM_INPUTS] = {{PA_DTYPE_UNDEFINED, 0, {0, 0, 0, 0}}};
  pa_stream stream = NULL;
  (void)stream;
  return inputs[PA_IN_QUERY].dtype == PA_DTYPE_UNDEFINED && PA_NUM_OUTPUTS == 4 ? 0 : 1;
}
