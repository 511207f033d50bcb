#include "cache-agent/fs/fetch_table.h"

#include <algorithm>

namespace spoke::agent {

FetchTable::Joined FetchTable::Join(const BlockKey& key, const Block& block, const Ask& ask) {
  auto it = fetches_.find(key);
  if (it != fetches_.end()) {
    const BlockFetchPtr& f = it->second;
    if (ask.cls == kDemandClass) f->deadline = std::max(f->deadline, ask.deadline);
    if (ask.cls == kWarmClass) f->warm_waiter = true;
    // A block asked for in the background first is read from the hub as a reader who can.
    if (!f->reader && block.reader != nullptr && !f->dispatched) f->reader = *block.reader;
    if (ask.cls >= f->cls) return {f, false, false};
    f->cls = ask.cls;  // promoted: goes ahead of the less urgent classes
    f->stored_as_demand = true;
    if (!f->dispatched) queues_[f->route][ask.cls].push_back(f);
    return {f, false, true};
  }
  auto f = std::make_shared<BlockFetch>();
  f->key = key;
  f->path = block.path;
  f->offset = block.offset;
  f->length = block.length;
  f->written_here = block.written_here;
  if (block.reader != nullptr) f->reader = *block.reader;
  f->cls = ask.cls;
  f->route = block.route;
  f->stored_as_demand = ask.cls != kPrefetchClass;
  f->deadline = ask.deadline;
  f->warm_waiter = ask.cls == kWarmClass;
  f->expert = ask.expert;
  f->predicted_use = ask.predicted_use;
  fetches_[key] = f;
  queues_[f->route][ask.cls].push_back(f);
  return {std::move(f), true, false};
}

void FetchTable::AddDone(BlockFetchPtr f) {
  const BlockKey key = f->key;
  fetches_[key] = std::move(f);
}

void FetchTable::Erase(const BlockFetch& f) {
  auto it = fetches_.find(f.key);
  if (it != fetches_.end() && it->second.get() == &f) fetches_.erase(it);
}

BlockFetchPtr FetchTable::PopQueued(int cls, SteadyTime now, std::vector<BlockFetchPtr>* expired,
                                    FetchRoute route) {
  auto& q = queues_[route][cls];
  while (!q.empty()) {
    BlockFetchPtr f = std::move(q.front());
    q.pop_front();
    // Stale entries: dispatched, done, or promoted (queued again in a higher class).
    if (f->dispatched || f->done || f->cls != cls) continue;
    if (cls == kDemandClass && !f->warm_waiter && f->deadline < now) {
      f->done = true;
      f->settled = true;
      f->result = std::unexpected(
          Error(Code::kTimeout, "hub read of " + f->path + " still queued at its read deadline"));
      Erase(*f);
      expired->push_back(std::move(f));
      continue;
    }
    return f;
  }
  return nullptr;
}

void FetchTable::Requeue(BlockFetchPtr f) {
  auto& q = queues_[f->route][f->cls];
  q.push_front(std::move(f));
}

bool FetchTable::QueuedFrom(int cls, FetchRoute route) const {
  for (int c = cls; c < kFetchClasses; ++c) {
    if (!queues_[route][c].empty()) return true;
  }
  return false;
}

std::vector<BlockFetchPtr> FetchTable::CancelQueued(const Error& error) {
  std::vector<BlockFetchPtr> cancelled;
  for (auto& route : queues_) {
    for (auto& q : route) {
      for (auto& f : q) {
        if (f->dispatched || f->done) continue;
        f->done = true;
        f->settled = true;
        f->result = std::unexpected(error);
        Erase(*f);
        cancelled.push_back(std::move(f));
      }
      q.clear();
    }
  }
  return cancelled;
}

}  // namespace spoke::agent
