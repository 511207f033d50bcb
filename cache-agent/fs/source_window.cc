#include "cache-agent/fs/source_window.h"

#include <algorithm>

namespace spoke::agent {

SourceWindow::SourceWindow(const Config& config)
    : config_(config),
      window_(std::clamp(config.initial_window, config.min_window, config.max_window)) {}

void SourceWindow::OnReply(uint64_t bytes) {
  // At least one byte per reply, so that small blocks (small files) grow it too.
  const uint64_t grow = std::max<uint64_t>(1, config_.step * bytes / window_);
  window_ = std::min(config_.max_window, window_ + grow);
}

void SourceWindow::OnRefused(TimePoint now) {
  if (last_cut_ && now - *last_cut_ < config_.cut_spacing) return;
  last_cut_ = now;
  window_ = std::max(config_.min_window, window_ / 2);
}

}  // namespace spoke::agent
