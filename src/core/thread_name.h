// Names the calling thread as the system shows it (top -H, perf, gdb,
// /proc/PID/task/TID/comm): "strata:" and the given role, cut to the 15
// bytes Linux keeps.
#pragma once

#include <string_view>

namespace strata {

void name_this_thread(std::string_view role);

}  // namespace strata
