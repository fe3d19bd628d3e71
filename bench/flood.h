// `hetps-bench flood`: a server under a flood of junk and of half-open connections while a
// legitimate worker pushes and pulls. Peers that send random frames and headers as fast as
// the server takes them and never read a reply, and raw TCP connections that never finish the
// ZeroMQ handshake (opened and replaced all the time), for `seconds`; with `join_peers`, peers
// that register a new worker at the scheduler on a new connection over and over. Measured: the
// worker's push-then-pull throughput before, during and after the flood (and whether every
// value it pulled was right), the server's and the scheduler's resident memory before, at
// their peak and after, and the registrations admitted and refused.
#pragma once

namespace hetps::bench {

struct FloodOptions {
  double seconds = 60;  // of flood
  int junk_peers = 4;   // sockets sending junk
  int half_open = 256;  // raw TCP connections held at once
  int join_peers = 0;   // peers registering new workers on new connections, at the scheduler
  double max_rss_growth_mb = 0;  // > 0: exit 1 when the server's peak grew more than this
};

// Prints one JSON object; returns the process exit code (1: the legitimate worker was not
// served, got a wrong value, or the memory bound was exceeded).
int RunFlood(const FloodOptions& options);

}  // namespace hetps::bench
