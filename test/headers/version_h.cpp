// version.h alone, as C++ with -Wall -Wextra -pedantic -Werror.
#include "pagedattn/version.h"

int main() {
  return PA_VERSION == PA_VERSION_INT(PA_VERSION_MAJOR, PA_VERSION_MINOR, PA_VERSION_PATCH) ? 0 : 1;
}
