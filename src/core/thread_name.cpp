// Thread names (thread_name.h).
#include "core/thread_name.h"

#include <pthread.h>

#include <algorithm>
#include <string>

namespace strata {

void name_this_thread(std::string_view role) {
  std::string name = "strata:" + std::string(role);
  name.resize(std::min<size_t>(name.size(), 15));    // the kernel's limit, without the NUL
  pthread_setname_np(pthread_self(), name.c_str());  // only fails on a name too long
}

}  // namespace strata
