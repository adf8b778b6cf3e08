/*
 * The workspace layout: every region pa_execute carves out of the caller's workspace, in one table
 * that one function both sizes and carves (pa__workspace_add), so the two cannot drift.
 *
 * pa_plan_create builds the plan's layout once: the write path's staged Q first
 * (pa__write_workspace, cuda/write/write.cu), then the chosen backend's regions (its plan op).
 * Each owner keeps the index pa__workspace_add returned and, at run time, turns it into an address
 * with pa__workspace_at. doc/development.md lists the regions of every backend.
 */
#ifndef PAGEDATTN_WORKSPACE_H
#define PAGEDATTN_WORKSPACE_H

#include <stddef.h>
#include <stdint.h>

#include "pagedattn/pagedattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One region: [offset, offset + bytes) of the workspace, offset a multiple of alignment. */
typedef struct pa__workspace_region {
  const char *name; /* what it holds, for PA_DEBUG=1 ("staged Q", "DECODE partial outputs", ...) */
  size_t offset;
  size_t bytes;
  size_t alignment; /* a power of two, at most PA_WORKSPACE_ALIGNMENT */
} pa__workspace_region;

enum { PA__MAX_WORKSPACE_REGIONS = 12 };

typedef struct pa__workspace_layout {
  int32_t count;       /* regions in use */
  int32_t overflowed;  /* a region's end did not fit in 64 bits, or the table was full */
  uint64_t end;        /* the end of the last region */
  size_t total;        /* what pa_execute needs: end rounded up to PA_WORKSPACE_ALIGNMENT (0 when
                        * empty); SIZE_MAX once overflowed */
  pa__workspace_region regions[PA__MAX_WORKSPACE_REGIONS];
} pa__workspace_layout;

/* Appends a region of count * elem_size bytes at the first multiple of `alignment` at or after
 * the current end, and returns its index; -1 (and the layout marked overflowed) when the sizes
 * overflow 64 bits or the table is full. */
int pa__workspace_add(pa__workspace_layout *w, const char *name, uint64_t count,
                      uint64_t elem_size, size_t alignment);

/* The address of region `index` in the workspace that starts at base. */
static inline void *pa__workspace_at(const pa__workspace_layout *w, int index, void *base) {
  return (char *)base + w->regions[index].offset;
}

#ifdef __cplusplus
}
#endif

#endif /* PAGEDATTN_WORKSPACE_H */
