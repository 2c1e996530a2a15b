// Thread names (core/thread_name.h) as the system shows them.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "core/thread_name.h"

namespace strata {
namespace {

std::string comm_of_this_thread() {
  const long tid = ::syscall(SYS_gettid);
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/comm");
  std::string name;
  std::getline(f, name);
  return name;
}

TEST(ThreadName, PrefixedAndCutToTheKernelsLimit) {
  std::string shown_short, shown_long;
  std::thread([&] {
    name_this_thread("load");
    shown_short = comm_of_this_thread();
    name_this_thread("cpu attention queue");
    shown_long = comm_of_this_thread();
  }).join();
  EXPECT_EQ(shown_short, "strata:load");
  EXPECT_EQ(shown_long, "strata:cpu atte");  // 15 bytes
}

}  // namespace
}  // namespace strata
