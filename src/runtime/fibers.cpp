#include "fibers.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

namespace tilus::fibers {

namespace {
thread_local Scheduler* tls_current = nullptr;
}  // namespace

Scheduler::Scheduler(size_t stack_bytes) {
  size_t page = size_t(sysconf(_SC_PAGESIZE));
  stack_bytes_ = (stack_bytes + page - 1) / page * page + page;  // one guard page below
}

Scheduler::~Scheduler() {
  for (auto& f : fibers_)
    if (f->stack) munmap(f->stack, stack_bytes_);
  for (void* s : free_stacks_) munmap(s, stack_bytes_);
}

void* Scheduler::take_stack() {
  if (!free_stacks_.empty()) {
    void* s = free_stacks_.back();
    free_stacks_.pop_back();
    return s;
  }
  void* s = mmap(nullptr, stack_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
                 -1, 0);
  if (s == MAP_FAILED) throw std::runtime_error("CPU backend: cannot map a fiber's stack");
  mprotect(s, size_t(sysconf(_SC_PAGESIZE)), PROT_NONE);  // an overflow faults instead of corrupting
  return s;
}

void Scheduler::give_stack(void* s) { free_stacks_.push_back(s); }

Fiber* Scheduler::spawn(std::function<void()> body) {
  auto f = std::make_unique<Fiber>();
  f->body = std::move(body);
  f->stack = take_stack();
  getcontext(&f->context);
  f->context.uc_stack.ss_sp = f->stack;
  f->context.uc_stack.ss_size = stack_bytes_;
  f->context.uc_link = &main_;
  uintptr_t p = reinterpret_cast<uintptr_t>(f.get());
  makecontext(&f->context, reinterpret_cast<void (*)()>(&Scheduler::trampoline), 2, unsigned(p >> 32),
              unsigned(p & 0xffffffffu));
  fibers_.push_back(std::move(f));
  ++progress_;
  return fibers_.back().get();
}

void Scheduler::trampoline(unsigned hi, unsigned lo) {
  auto* f = reinterpret_cast<Fiber*>((uintptr_t(hi) << 32) | uintptr_t(lo));
  f->body();
  f->done = true;
  // Returning switches to uc_link: the scheduler's loop.
}

bool Scheduler::run(const std::function<bool()>& stop) {
  Scheduler* outer = tls_current;
  tls_current = this;
  bool finished = true;
  for (;;) {
    bool live = false, ran = false;
    for (size_t i = 0; i < fibers_.size(); ++i) {  // spawning appends: index, not iterator
      Fiber* f = fibers_[i].get();
      if (f->done) continue;
      live = true;
      if (f->blocked_at && f->blocked_at == progress_) continue;
      running_ = f;
      swapcontext(&main_, &f->context);
      running_ = nullptr;
      ran = true;
      f = fibers_[i].get();
      if (f->done && f->stack) {
        give_stack(f->stack);
        f->stack = nullptr;
        ++progress_;
      }
      if (stop && stop()) break;
    }
    if (!live || (stop && stop())) break;
    if (!ran) {
      finished = false;
      break;
    }
  }
  tls_current = outer;
  return finished;
}

void Scheduler::wait_until(const std::function<bool()>& ready, std::function<std::string()> waiting_for) {
  Fiber* f = running_;
  while (!ready()) {
    f->blocked_at = progress_;
    f->waiting_for = waiting_for;
    swapcontext(&f->context, &main_);
  }
  f->blocked_at = 0;
  f->waiting_for = nullptr;
}

std::vector<std::string> Scheduler::blocked() const {
  std::vector<std::string> out;
  for (auto& f : fibers_)
    if (!f->done && f->waiting_for) out.push_back(f->waiting_for());
  return out;
}

void Scheduler::clear() {
  for (auto& f : fibers_)
    if (f->stack) give_stack(f->stack);
  fibers_.clear();
}

Scheduler* Scheduler::current() { return tls_current; }

}  // namespace tilus::fibers
