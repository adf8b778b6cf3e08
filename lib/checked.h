/*
 * Checked size arithmetic: the one helper for every product and sum of caller-given sizes on the
 * host (lib/ and the host side of cuda/). Each returns 1 when the exact result fits the type and
 * stores it in *out; on overflow it returns 0 and *out holds the wrapped value, which callers must
 * not use. Header-only, C11 and C++ (nvcc's host compiler includes it through internal.h users).
 */
#ifndef PAGEDATTN_CHECKED_H
#define PAGEDATTN_CHECKED_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if !defined(__GNUC__) && !defined(__clang__)
#error "lib/checked.h needs __builtin_mul_overflow (GCC or Clang)"
#endif

static inline int pa__mul_i64(int64_t a, int64_t b, int64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}
static inline int pa__mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}
static inline int pa__add_u64(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_add_overflow(a, b, out);
}
static inline int pa__mul_size(size_t a, size_t b, size_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}
static inline int pa__add_size(size_t a, size_t b, size_t *out) {
  return !__builtin_add_overflow(a, b, out);
}

/* a * b * c in size_t (a host allocation or workspace region of a*b elements of c bytes). */
static inline int pa__mul3_size(size_t a, size_t b, size_t c, size_t *out) {
  return pa__mul_size(a, b, out) && pa__mul_size(*out, c, out);
}

#ifdef __cplusplus
}
#endif

#endif /* PAGEDATTN_CHECKED_H */
