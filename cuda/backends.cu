// The GPU backends built into this library, in AUTO's order of preference (doc/backends.md, "What
// AUTO picks, and why"). A new backend adds one line here, before the fallback.
#include "internal.h"

extern "C" {
extern const pa__backend_ops pa__decode_backend;   // decode-shaped steps (plan.c: auto_prefers)
extern const pa__backend_ops pa__prefill_backend;  // every other step it serves
extern const pa__backend_ops pa__latent_backend;   // decode-shaped LATENT steps (auto_prefers)
extern const pa__backend_ops pa__unfused_backend;  // the fallback: serves everything, so last

const pa__backend_ops *const pa__gpu_backends[] = {
    &pa__decode_backend,
    &pa__prefill_backend,
    &pa__latent_backend,
    &pa__unfused_backend,
    nullptr,
};
}
