// Allocator tuning for a role process. ZeroMQ allocates one buffer per received message; with
// glibc's defaults a burst of partition-sized buffers (MiBs) is returned to the kernel when
// freed and page-faulted back in on the next message, which halves large-transfer throughput.
// Keeping freed memory mapped makes those buffers be reused. Client::Connect calls it (unless
// ClientOptions::tune_allocator is false), the server at the top of main().
#pragma once

namespace hetps {

void TuneAllocatorForTransfers();

}  // namespace hetps
