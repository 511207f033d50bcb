#include "common/spare_vectors.h"

#include <utility>

#include "common/thread_annotations.h"

namespace spoke {

namespace {

struct Stock {
  Mutex mu;
  std::vector<std::vector<char>> spare GUARDED_BY(mu);
};

Stock& TheStock() {
  static auto* stock = new Stock();  // never destroyed: blocks may be let go during exit
  return *stock;
}

}  // namespace

std::vector<char> TakeSpareVector(size_t bytes) {
  std::vector<char> v;
  if (bytes > kSpareVectorCapacity / 2 && bytes <= kSpareVectorCapacity) {
    Stock& stock = TheStock();
    {
      MutexLock lock(stock.mu);
      if (!stock.spare.empty()) {
        v = std::move(stock.spare.back());
        stock.spare.pop_back();
        return v;
      }
    }
    bytes = kSpareVectorCapacity;
  }
  v.reserve(bytes);
  return v;
}

void GiveSpareVector(std::vector<char>&& v) {
  if (v.capacity() == kSpareVectorCapacity) {
    v.clear();
    Stock& stock = TheStock();
    MutexLock lock(stock.mu);
    if (stock.spare.size() < kMaxSpareVectors) {
      stock.spare.push_back(std::move(v));
      return;
    }
  }
  std::vector<char>().swap(v);  // freed here, outside the lock
}

size_t SpareVectorCount() {
  Stock& stock = TheStock();
  MutexLock lock(stock.mu);
  return stock.spare.size();
}

}  // namespace spoke
