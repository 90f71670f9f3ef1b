// Clang thread-safety analysis (-Wthread-safety) for the library's internal locks.
// std::mutex carries no annotations in libstdc++, so locks are taken through these
// wrappers; with other compilers the attributes vanish.
#pragma once

#include <mutex>

#if defined(__clang__)
#define HANDOFF_TSA(x) __attribute__((x))
#else
#define HANDOFF_TSA(x)
#endif

#define HANDOFF_CAPABILITY(name) HANDOFF_TSA(capability(name))
#define HANDOFF_SCOPED_CAPABILITY HANDOFF_TSA(scoped_lockable)
#define HANDOFF_GUARDED_BY(m) HANDOFF_TSA(guarded_by(m))
#define HANDOFF_ACQUIRE(...) HANDOFF_TSA(acquire_capability(__VA_ARGS__))
#define HANDOFF_RELEASE(...) HANDOFF_TSA(release_capability(__VA_ARGS__))

namespace handoff::detail {

class HANDOFF_CAPABILITY("mutex") annotated_mutex {
 public:
  void lock() HANDOFF_ACQUIRE() { m_.lock(); }
  void unlock() HANDOFF_RELEASE() { m_.unlock(); }

 private:
  std::mutex m_;
};

class HANDOFF_SCOPED_CAPABILITY scoped_lock {
 public:
  explicit scoped_lock(annotated_mutex& m) HANDOFF_ACQUIRE(m) : m_(m) { m_.lock(); }
  ~scoped_lock() HANDOFF_RELEASE() { m_.unlock(); }
  scoped_lock(const scoped_lock&) = delete;
  scoped_lock& operator=(const scoped_lock&) = delete;

 private:
  annotated_mutex& m_;
};

}  // namespace handoff::detail
