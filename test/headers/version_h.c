/* version.h alone, as C11 with -Wall -Wextra -pedantic -Werror. */
#include "pagedattn/version.h"

int main(void) {
  return PA_VERSION == PA_VERSION_INT(PA_VERSION_MAJOR, PA_VERSION_MINOR, PA_VERSION_PATCH) ? 0 : 1;
}
