// The main of every GoogleTest executable here (instead of GTest::gtest_main): runs the tests
// and, when every test that ran was skipped (GTEST_SKIP: no GPU, no NVRTC, no CPU backend) and
// none failed, prints a line that ctest's SKIP_REGULAR_EXPRESSION turns into "Skipped"
// (tests/cpp/CMakeLists.txt), so that a suite that tested nothing is not reported as passed.
// The exit code is GoogleTest's: 0 when nothing failed.
#include <cstdio>

#include <gtest/gtest.h>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  int rc = RUN_ALL_TESTS();
  const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
  if (rc == 0 && unit.failed_test_count() == 0 && unit.successful_test_count() == 0 && unit.skipped_test_count() > 0)
    std::printf("tilus-tests: all %d tests skipped\n", unit.skipped_test_count());
  return rc;
}
