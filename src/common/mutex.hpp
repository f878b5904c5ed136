#pragma once
// A mutex whose holding clang's -Wthread-safety checks: members declared
// SLUICE_GUARDED_BY(m) are touched only with `m` held, or the build fails
// (scripts/check-thread-safety.sh, in CI). std::mutex and std::lock_guard carry no
// such annotations in libstdc++, so the guarded members' mutexes are these: the same
// std::mutex inside, with the locks as scoped capabilities. GCC ignores the
// attributes; the ThreadSanitizer build checks the threading at run time.
#include <mutex>

#if defined(__clang__)
#define SLUICE_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define SLUICE_THREAD_ANNOTATION(x)
#endif

#define SLUICE_CAPABILITY(name) SLUICE_THREAD_ANNOTATION(capability(name))
#define SLUICE_SCOPED_CAPABILITY SLUICE_THREAD_ANNOTATION(scoped_lockable)
#define SLUICE_GUARDED_BY(mutex) SLUICE_THREAD_ANNOTATION(guarded_by(mutex))
#define SLUICE_PT_GUARDED_BY(mutex) SLUICE_THREAD_ANNOTATION(pt_guarded_by(mutex))
#define SLUICE_REQUIRES(...) SLUICE_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define SLUICE_EXCLUDES(...) SLUICE_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define SLUICE_ACQUIRE(...) SLUICE_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define SLUICE_RELEASE(...) SLUICE_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define SLUICE_TRY_ACQUIRE(...) SLUICE_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))

namespace sluice {

class SLUICE_CAPABILITY("mutex") Mutex {
 public:
  void lock() SLUICE_ACQUIRE() { mutex_.lock(); }
  void unlock() SLUICE_RELEASE() { mutex_.unlock(); }
  bool try_lock() SLUICE_TRY_ACQUIRE(true) { return mutex_.try_lock(); }
  // For std::condition_variable, through UniqueMutexLock::native().
  std::mutex& native() { return mutex_; }

 private:
  std::mutex mutex_;
};

// std::lock_guard's part: held from construction to the end of the scope.
class SLUICE_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mutex) SLUICE_ACQUIRE(mutex) : mutex_(mutex) { mutex_.lock(); }
  ~MutexLock() SLUICE_RELEASE() { mutex_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mutex_;
};

// std::unique_lock's part: may be released and taken again within its scope, and
// waited on with a std::condition_variable (cv.wait(lock.native(), ...): the wait
// gives the mutex back held, as the analysis assumes).
class SLUICE_SCOPED_CAPABILITY UniqueMutexLock {
 public:
  explicit UniqueMutexLock(Mutex& mutex) SLUICE_ACQUIRE(mutex) : lock_(mutex.native()) {}
  ~UniqueMutexLock() SLUICE_RELEASE() = default;
  UniqueMutexLock(const UniqueMutexLock&) = delete;
  UniqueMutexLock& operator=(const UniqueMutexLock&) = delete;
  void lock() SLUICE_ACQUIRE() { lock_.lock(); }
  void unlock() SLUICE_RELEASE() { lock_.unlock(); }
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace sluice
