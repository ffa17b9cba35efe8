// libphos_stubs_test.so: the generated export layer alone (every CUDA
// function a weak stub), for tests that dlopen it. C entry points so a test
// can reach this library's own table and counters through dlsym.
#include "interposer/export/unsupported.h"

extern "C" __attribute__((visibility("default"))) const void* phos_test_find_export(
    const char* name) {
  return phos::interposer::FindExport(name);
}

extern "C" __attribute__((visibility("default"))) const void* phos_test_find_export_versioned(
    const char* name, int cuda_version) {
  return phos::interposer::FindExportVersioned(name, cuda_version);
}

extern "C" __attribute__((visibility("default"))) uint64_t phos_test_unsupported_count(
    const char* name) {
  return phos::interposer::UnsupportedCount(phos::interposer::ApiIdFromName(name));
}
