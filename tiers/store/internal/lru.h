// LruList: an intrusive doubly-linked recency list. Nodes carry their own
// links (one LruLinks member per list a node can be on, named by the list's
// second template argument), so a page costs no allocation to list and
// relinking on every touch is O(1). Head is newest, tail oldest. Not
// thread-safe: a list belongs to one index shard and is used under its lock.
#pragma once

#include <cstddef>

namespace kvtier::tiers {

template <typename Node>
struct LruLinks {
  Node* prev = nullptr;  // toward the head (newer)
  Node* next = nullptr;  // toward the tail (older)
};

template <typename Node, LruLinks<Node> Node::*kLinks>
class LruList {
 public:
  Node* head() const { return head_; }
  Node* tail() const { return tail_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  void PushFront(Node* n) {
    L(n).prev = nullptr;
    L(n).next = head_;
    if (head_ != nullptr) L(head_).prev = n;
    head_ = n;
    if (tail_ == nullptr) tail_ = n;
    ++size_;
  }

  // Links n just below `above` (older than it); above == nullptr: at the head.
  void InsertAfter(Node* above, Node* n) {
    if (above == nullptr) return PushFront(n);
    LruLinks<Node>& a = L(above);
    L(n).prev = above;
    L(n).next = a.next;
    if (a.next != nullptr)
      L(a.next).prev = n;
    else
      tail_ = n;
    a.next = n;
    ++size_;
  }

  void Remove(Node* n) {
    LruLinks<Node>& l = L(n);
    if (l.prev != nullptr)
      L(l.prev).next = l.next;
    else
      head_ = l.next;
    if (l.next != nullptr)
      L(l.next).prev = l.prev;
    else
      tail_ = l.prev;
    l.prev = l.next = nullptr;
    --size_;
  }

  void MoveToFront(Node* n) {
    if (head_ == n) return;
    Remove(n);
    PushFront(n);
  }

  // Next-newer node from `n` (toward the head), for tail-first scans.
  static Node* Newer(Node* n) { return L(n).prev; }
  // Next-older node from `n` (toward the tail), for head-first scans.
  static Node* Older(Node* n) { return L(n).next; }

 private:
  static LruLinks<Node>& L(Node* n) { return n->*kLinks; }

  Node* head_ = nullptr;
  Node* tail_ = nullptr;
  size_t size_ = 0;
};

}  // namespace kvtier::tiers
