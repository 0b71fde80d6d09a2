// LruList: an intrusive doubly-linked recency list. Nodes carry their own
// prev/next pointers, so a page costs no allocation to list and relinking on
// every touch is O(1). Head is newest, tail oldest. Not thread-safe: a list
// belongs to one index shard and is used under that shard's lock.
#pragma once

#include <cstddef>

namespace kvtier::tiers {

template <typename Node>
class LruList {
 public:
  Node* head() const { return head_; }
  Node* tail() const { return tail_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  void PushFront(Node* n) {
    n->prev = nullptr;
    n->next = head_;
    if (head_ != nullptr) head_->prev = n;
    head_ = n;
    if (tail_ == nullptr) tail_ = n;
    ++size_;
  }

  void Remove(Node* n) {
    if (n->prev != nullptr)
      n->prev->next = n->next;
    else
      head_ = n->next;
    if (n->next != nullptr)
      n->next->prev = n->prev;
    else
      tail_ = n->prev;
    n->prev = n->next = nullptr;
    --size_;
  }

  void MoveToFront(Node* n) {
    if (head_ == n) return;
    Remove(n);
    PushFront(n);
  }

  // Next-newer node from `n` (toward the head), for tail-first scans.
  static Node* Newer(Node* n) { return n->prev; }

 private:
  Node* head_ = nullptr;
  Node* tail_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kvtier::tiers
