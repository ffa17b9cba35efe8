// xxh3 over bulk bytes (image chunks, transferred files, pre-copies),
// through libxxhash's runtime CPU dispatch: XXH3_64bits and
// XXH3_64bits_update become their _dispatch twins, which use AVX2 or
// AVX-512 where the CPU has them. Debian builds the library's plain
// entry points for SSE2 only: ~20 GB/s on this project's VM against
// ~85 GB/s dispatched — the hash was 14 % of an image transfer's CPU
// (docs/benchmarks.md "Data channel vs gRPC vs iperf3").
//
// Include this instead of <xxhash.h> wherever many bytes are hashed. The
// digests are the same whichever code path computes them.
#pragma once

#include <xxhash.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xxh_x86dispatch.h>  // its macros replace XXH3_64bits{,_update} with the dispatched ones
#endif
