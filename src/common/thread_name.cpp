#include "common/thread_name.hpp"

#include <pthread.h>

namespace sluice::common {
namespace {
constexpr std::size_t kMaxName = 15;  // the kernel's TASK_COMM_LEN, less its NUL
}  // namespace

void name_this_thread(const std::string& name) {
  // Only this thread's name, and only for people and tools: a failure changes nothing.
  pthread_setname_np(pthread_self(), name.substr(0, kMaxName).c_str());
}

void name_this_thread(const std::string& prefix, int index) {
  const std::string number = "-" + std::to_string(index);
  name_this_thread(prefix.substr(0, kMaxName - std::min(kMaxName, number.size())) + number);
}

}  // namespace sluice::common
