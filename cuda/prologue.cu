// PLACEHOLDER until the write-path issue lands.
#include "internal.h"
extern "C" pa_status pa__prologue_run(const pa_plan *, const pa__io *, pa__stream) {
  return pa__fail(PA_ERROR_NOT_SUPPORTED, "prologue: not built");
}
