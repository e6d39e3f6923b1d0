// kgen has one log level: runtime/base/log.h reads KGEN_LOG_LEVEL, and the cache's lines
// (cache/log.h) go through that log, so the same value gives the same level in both.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "base/log.h"
#include "cache/log.h"

namespace kgen {
namespace {

TEST(LogLevel, ParsesTheValuesOfKgenLogLevel) {
  EXPECT_EQ(parse_log_level("error"), LogLevel::error);
  EXPECT_EQ(parse_log_level("warn"), LogLevel::warn);
  EXPECT_EQ(parse_log_level("warning"), LogLevel::warn);
  EXPECT_EQ(parse_log_level("info"), LogLevel::info);
  EXPECT_EQ(parse_log_level("debug"), LogLevel::debug);
  for (const char* bad : {"", "DEBUG", "verbose", "3", "debug "}) EXPECT_EQ(parse_log_level(bad), LogLevel::info) << bad;
  EXPECT_EQ(parse_log_level(nullptr), LogLevel::info);
}

// In a child process with KGEN_LOG_LEVEL=`value`: exits with 10 × the base log's level plus 2 if
// the cache printed its warning line (a corrupt entry) and 1 if it printed its info line.
int child_levels(const char* value) {
  if (value) ::setenv("KGEN_LOG_LEVEL", value, 1);
  else ::unsetenv("KGEN_LOG_LEVEL");
  ::testing::internal::CaptureStderr();
  cache::log_line("corrupt entry x: checksum mismatch");
  cache::log_line("size cap passed");
  const std::string err = ::testing::internal::GetCapturedStderr();
  const bool warn = err.find("kgen [warn] cache: corrupt entry x") != std::string::npos;
  const bool info = err.find("kgen [info] cache: size cap passed") != std::string::npos;
  return 10 * static_cast<int>(log_level()) + (warn ? 2 : 0) + (info ? 1 : 0);
}

TEST(LogLevel, TheCacheFollowsTheSameLevel) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // value, base level, cache lines printed (2: the warning, 1: the info line)
  const struct {
    const char* value;
    int want;
  } cases[] = {{"error", 0}, {"warn", 10 + 2}, {"info", 20 + 3}, {"debug", 30 + 3}, {"bogus", 20 + 3}, {nullptr, 20 + 3}};
  for (const auto& c : cases)
    EXPECT_EXIT(std::_Exit(child_levels(c.value)), ::testing::ExitedWithCode(c.want), "") << (c.value ? c.value : "(unset)");
}

TEST(LogLevel, SetLogLevelFiltersTheCacheToo) {
  ::testing::internal::CaptureStderr();
  set_log_level(LogLevel::error);
  cache::log_line("corrupt entry y");
  set_log_level(LogLevel::warn);
  cache::log_line("corrupt entry z");
  cache::log_line("an info line");
  set_log_level(LogLevel::info);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.find("entry y"), std::string::npos) << err;
  EXPECT_NE(err.find("kgen [warn] cache: corrupt entry z"), std::string::npos) << err;
  EXPECT_EQ(err.find("an info line"), std::string::npos) << err;
}

}  // namespace
}  // namespace kgen
