/* Status strings and the thread-local last-error message. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

static _Thread_local char last_error[1024];

const char *pa_status_string(pa_status s) {
  switch (s) {
  case PA_SUCCESS: return "PA_SUCCESS";
  case PA_ERROR_INVALID_ARGUMENT: return "PA_ERROR_INVALID_ARGUMENT";
  case PA_ERROR_WORKSPACE_TOO_SMALL: return "PA_ERROR_WORKSPACE_TOO_SMALL";
  case PA_ERROR_MISALIGNED: return "PA_ERROR_MISALIGNED";
  case PA_ERROR_CONTRACT_VIOLATION: return "PA_ERROR_CONTRACT_VIOLATION";
  case PA_ERROR_NOT_SUPPORTED: return "PA_ERROR_NOT_SUPPORTED";
  case PA_ERROR_NO_DEVICE: return "PA_ERROR_NO_DEVICE";
  case PA_ERROR_CUDA: return "PA_ERROR_CUDA";
  case PA_ERROR_CUBLAS: return "PA_ERROR_CUBLAS";
  case PA_ERROR_OUT_OF_MEMORY: return "PA_ERROR_OUT_OF_MEMORY";
  case PA_ERROR_INTERNAL: return "PA_ERROR_INTERNAL";
  }
  return "PA_ERROR_UNKNOWN_STATUS";
}

size_t pa_last_error_message(char *buf, size_t size) {
  size_t len = strlen(last_error);
  if (buf && size > 0) {
    size_t n = len < size - 1 ? len : size - 1;
    memcpy(buf, last_error, n);
    buf[n] = '\0';
  }
  return len;
}

pa_status pa__fail(pa_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return status;
}

void pa__clear_error(void) { last_error[0] = '\0'; }
