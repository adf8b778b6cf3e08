// The GPU backends built into this library, in AUTO's order of preference (contract §5).
#include "internal.h"

extern "C" {
const pa__backend_ops *const pa__gpu_backends[] = {
    nullptr,
};
}
