#pragma once
// The last few values a thread made, by key, the most recent first: what the estimate makes
// once per schedule shape (the pipeline's traversal, a stage's order) and a sweep or search
// asks for again for many plans of that shape. Used through a thread_local instance.
#include <algorithm>
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace meshwork::models {

template <class Key, class Value, std::size_t kKept = 8>
class KeptLast {
 public:
  // The value kept for `key`, else make()'s, kept unless keep(value) is false (too large to
  // hold). The pointer keeps the value alive after later calls push it out.
  template <class Make, class Keep>
  std::shared_ptr<const Value> get(const Key& key, Make&& make, Keep&& keep) {
    for (std::size_t i = 0; i < kept_.size(); ++i) {
      if (kept_[i].first == key) {
        std::rotate(kept_.begin(), kept_.begin() + static_cast<std::ptrdiff_t>(i), kept_.begin() + static_cast<std::ptrdiff_t>(i) + 1);
        return kept_.front().second;
      }
    }
    std::shared_ptr<const Value> value = std::make_shared<const Value>(make());
    if (!keep(*value)) return value;
    if (kept_.size() == kKept) kept_.pop_back();
    kept_.insert(kept_.begin(), {key, value});
    return value;
  }

 private:
  std::vector<std::pair<Key, std::shared_ptr<const Value>>> kept_;
};

}  // namespace meshwork::models
