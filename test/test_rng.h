/* splitmix64: the deterministic random numbers of the test suites (one definition for all). */
#ifndef PA_TEST_RNG_H
#define PA_TEST_RNG_H

#include <stdint.h>

typedef struct rng {
  uint64_t state;
} rng;

static inline uint64_t rng_next(rng *r) {
  uint64_t z = (r->state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

#endif
