#include "common/interrupt.h"

#include <string>

namespace spoke {
namespace {
thread_local Interrupt* current_interrupt = nullptr;
}  // namespace

void Interrupt::Fire() {
  fired_.store(true, std::memory_order_release);
  MutexLock lock(mu_);
  if (wake_ != nullptr) (*wake_)();
}

Interrupt::Waker::Waker(Interrupt* interrupt, std::function<void()> wake)
    : interrupt_(interrupt), wake_(std::move(wake)) {
  if (interrupt_ == nullptr) return;
  MutexLock lock(interrupt_->mu_);
  interrupt_->wake_ = &wake_;
}

Interrupt::Waker::~Waker() {
  if (interrupt_ == nullptr) return;
  MutexLock lock(interrupt_->mu_);  // a Fire() calling wake_ now is waited for
  interrupt_->wake_ = nullptr;
}

InterruptScope::InterruptScope(Interrupt* interrupt) : previous_(current_interrupt) {
  current_interrupt = interrupt;
}

InterruptScope::~InterruptScope() { current_interrupt = previous_; }

Interrupt* InterruptScope::Current() { return current_interrupt; }

Error Interrupted(std::string_view what) {
  return Error(Code::kInterrupted, "the caller gave up waiting for " + std::string(what));
}

}  // namespace spoke
