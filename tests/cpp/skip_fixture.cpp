// Fixture executables for tests/repo/test_skip_reporting.py, built three ways
// (tests/cpp/CMakeLists.txt): SKIP_FIXTURE_ALL_SKIPPED (two tests, both skip),
// SKIP_FIXTURE_MIXED (one passes, one skips), SKIP_FIXTURE_FAILING (one fails, one skips).
#include <gtest/gtest.h>

TEST(SkipFixture, Skips) { GTEST_SKIP() << "fixture: no such device"; }

#if defined(SKIP_FIXTURE_ALL_SKIPPED)
TEST(SkipFixture, SkipsToo) { GTEST_SKIP() << "fixture: no such library"; }
#elif defined(SKIP_FIXTURE_MIXED)
TEST(SkipFixture, Passes) { EXPECT_EQ(1 + 1, 2); }
#elif defined(SKIP_FIXTURE_FAILING)
TEST(SkipFixture, Fails) { EXPECT_EQ(1 + 1, 3) << "fixture: fails on purpose"; }
#endif
