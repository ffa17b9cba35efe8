// Reporting of CUDA API functions that libphos.so exports but does not
// implement yet (the generated weak stubs call ReportUnsupported).
#pragma once

#include <cstdint>

#include "phos_api_ids.h"

namespace phos::interposer {

// Counts the call and, the first time for this id (process-wide, thread-safe),
// writes "phos: <name> is not supported by phos yet" to stderr.
void ReportUnsupported(ApiId id);

// Number of times ReportUnsupported(id) was called (0 for out-of-range ids).
uint64_t UnsupportedCount(ApiId id);

// Whether the once-per-name message for id has been written.
bool UnsupportedLogged(ApiId id);

}  // namespace phos::interposer
