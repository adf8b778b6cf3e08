/* pa__workspace_add: the one function that sizes and carves the workspace (workspace.h). */
#include "workspace.h"

#include "checked.h"

int pa__workspace_add(pa__workspace_layout *w, const char *name, uint64_t count,
                      uint64_t elem_size, size_t alignment) {
  uint64_t start, bytes, end;
  if (w->overflowed || w->count == PA__MAX_WORKSPACE_REGIONS ||
      !pa__add_u64(w->end, (uint64_t)alignment - 1, &start) ||
      !pa__mul_u64(count, elem_size, &bytes))
    goto overflow;
  start = start / alignment * alignment;
  if (!pa__add_u64(start, bytes, &end) ||
      end > (uint64_t)SIZE_MAX - PA_WORKSPACE_ALIGNMENT)
    goto overflow;
  pa__workspace_region *r = &w->regions[w->count];
  r->name = name;
  r->offset = (size_t)start;
  r->bytes = (size_t)bytes;
  r->alignment = alignment;
  w->end = end;
  w->total = (size_t)((end + PA_WORKSPACE_ALIGNMENT - 1) / PA_WORKSPACE_ALIGNMENT *
                      PA_WORKSPACE_ALIGNMENT);
  return w->count++;

overflow:
  w->overflowed = 1;
  w->total = SIZE_MAX;
  return -1;
}
