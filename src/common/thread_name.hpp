#pragma once
// Names the calling thread, as `top -H`, `ps -L`, perf, gdb and /proc/self/task/*/comm
// show it: "sluice-io", "sluice-work-3". Linux keeps 15 bytes; a longer name is cut
// there (the numbered ones keep their number, at the end).
#include <string>

namespace sluice::common {

void name_this_thread(const std::string& name);
// "sluice-work-3": `prefix` + "-" + `index`, the prefix shortened to keep the number.
void name_this_thread(const std::string& prefix, int index);

}  // namespace sluice::common
