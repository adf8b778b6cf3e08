// pagedattn.h alone, as C++ with -Wall -Wextra -pedantic -Werror: extern "C", no C-only constructs.
#include "pagedattn/pagedattn.h"

int main() {
  pa_tensor_desc inputs[PA_NUM_INPUTS] = {};
  pa_status (*create)(pa_plan **, const pa_attributes *, const pa_tensor_desc *,
                      const pa_tensor_desc *, const pa_plan_options *) = &pa_plan_create;
  (void)create;
  return inputs[PA_IN_QUERY].dtype == PA_DTYPE_UNDEFINED ? 0 : 1;
}
