// Fibers for the CPU backend: the blocks of a cluster, and the thread groups of a block that wait
// on each other (a producer warp and its consumers), run as fibers on one host thread, switching
// where one waits on something another must do, as the GPU's warps would run at once. Internal to
// src/runtime.
#pragma once

#include <ucontext.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tilus::fibers {

struct Fiber {
  ucontext_t context;
  void* stack = nullptr;
  std::function<void()> body;
  bool done = false;
  // The progress count when it last found what it waits for missing (0: not waiting): it runs
  // again only once something has changed since.
  uint64_t blocked_at = 0;
  // What it waits for, for the report of a deadlock.
  std::function<std::string()> waiting_for;
};

class Scheduler {
 public:
  // Each fiber gets a stack of `stack_bytes` (address space; the kernel commits what it touches).
  explicit Scheduler(size_t stack_bytes);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // A fiber that runs `body` once the scheduler (or the fiber that calls this) yields.
  Fiber* spawn(std::function<void()> body);
  // Runs the fibers until every one is done (true), or until none can go on: every live fiber waits
  // and nothing changed since it last looked (false; `blocked()` says what they wait for), or until
  // `stop()` says so (true). The fibers left are abandoned (their stacks freed, never resumed).
  bool run(const std::function<bool()>& stop);
  // From a fiber: returns once `ready()` holds, running the others meanwhile.
  void wait_until(const std::function<bool()>& ready, std::function<std::string()> waiting_for);
  // Something a waiting fiber may wait for has changed (an arrival, a fiber's end).
  void progress() { ++progress_; }
  std::vector<std::string> blocked() const;
  // Forgets the fibers that are done (their stacks are kept for the next ones).
  void clear();

  // The scheduler of this host thread's running fiber (nullptr outside fibers).
  static Scheduler* current();

 private:
  static void trampoline(unsigned hi, unsigned lo);
  void* take_stack();
  void give_stack(void* s);

  size_t stack_bytes_;
  ucontext_t main_;
  std::vector<std::unique_ptr<Fiber>> fibers_;
  std::vector<void*> free_stacks_;
  Fiber* running_ = nullptr;
  uint64_t progress_ = 1;
};

}  // namespace tilus::fibers
