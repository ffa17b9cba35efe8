// main() of every phos GoogleTest program.
//
// Touches spdlog's default logger before any test starts a thread. The
// registry behind it is a function-local static inside libspdlog.so, which
// is not built with ThreadSanitizer; if two threads of a test create it
// concurrently, TSan cannot see the guard's synchronisation and reports a
// race that is not there. (phosd itself calls InitLogging before starting
// threads, so it never hits this.)
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  spdlog::default_logger();
  return RUN_ALL_TESTS();
}
