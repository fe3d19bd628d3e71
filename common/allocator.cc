#include "common/allocator.h"

#include <malloc.h>

namespace hetps {

void TuneAllocatorForTransfers() {
  // Serve buffers up to 32 MiB (glibc's largest heap allocation) from the heap instead of
  // fresh mmaps, and only give memory back once 1 GiB is free at the top of a heap.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

}  // namespace hetps
