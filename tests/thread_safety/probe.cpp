// scripts/check-thread-safety.sh compiles this twice: as it is (the guarded member is
// touched with its mutex held: it must compile) and with SLUICE_PROBE_UNGUARDED (one
// access without the mutex: clang's -Wthread-safety must refuse it), so the check is
// known to be able to fail.
#include "common/mutex.hpp"

namespace {

class Counter {
 public:
  void add() {
    sluice::MutexLock lock(mutex_);
    ++count_;
  }
  int read() {
#ifdef SLUICE_PROBE_UNGUARDED
    return count_;
#else
    sluice::UniqueMutexLock lock(mutex_);
    const int n = count_;
    lock.unlock();
    return n;
#endif
  }

 private:
  sluice::Mutex mutex_;
  int count_ SLUICE_GUARDED_BY(mutex_) = 0;
};

}  // namespace

int main() {
  Counter c;
  c.add();
  return c.read() == 1 ? 0 : 1;
}
