// A bounded blocking queue between pipeline stages, and what its capacity does under load.
//
// Part 1 prices backpressure exactly: a deterministic, tick-by-tick model of a producer that sends
// bursts into a queue of fixed capacity and a consumer that serves one item per tick, under two
// policies for a full queue (block the producer, or drop the item). Part 2 runs the real queue with
// threads and checks what must hold whatever the scheduler does: every item arrives once, each
// producer's items in order, and the queue never holds more than its capacity.
//
// Build and run:  g++ -std=c++20 -O2 -Wall -Wextra -Werror bounded_queue.cpp -o bounded_queue && ./bounded_queue
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

// region queue
// A queue of at most `capacity` items shared by threads. push() blocks while the queue is full,
// which is backpressure: a fast producer is slowed to the consumer's pace instead of growing memory
// without bound. try_push() never blocks; it refuses the item, and the caller decides (drop, retry,
// answer "busy"). close() wakes everyone: pushes fail, pops drain what is left, then end.
template <class T>
class BoundedQueue {
 public:
  explicit BoundedQueue(std::size_t capacity) : capacity_(capacity) {
    if (capacity == 0) throw std::invalid_argument("capacity must be at least 1");
  }

  bool push(T item) {
    std::unique_lock lock(mutex_);  // RAII: released on every return path, exceptions included
    if (items_.size() == capacity_ && !closed_) ++blocked_pushes_;
    not_full_.wait(lock, [&] { return items_.size() < capacity_ || closed_; });
    if (closed_) return false;
    items_.push_back(std::move(item));
    if (items_.size() > max_depth_) max_depth_ = items_.size();
    not_empty_.notify_one();
    return true;
  }

  bool try_push(T item) {
    std::lock_guard lock(mutex_);
    if (closed_ || items_.size() == capacity_) return false;
    items_.push_back(std::move(item));
    if (items_.size() > max_depth_) max_depth_ = items_.size();
    not_empty_.notify_one();
    return true;
  }

  std::optional<T> pop() {
    std::unique_lock lock(mutex_);
    if (items_.empty() && !closed_) ++blocked_pops_;
    not_empty_.wait(lock, [&] { return !items_.empty() || closed_; });
    if (items_.empty()) return std::nullopt;  // closed and drained
    T item = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return item;
  }

  void close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    not_full_.notify_all();
    not_empty_.notify_all();
  }

  struct Stats {
    std::size_t max_depth, blocked_pushes, blocked_pops;
  };
  Stats stats() const {
    std::lock_guard lock(mutex_);
    return {max_depth_, blocked_pushes_, blocked_pops_};
  }

 private:
  const std::size_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable not_full_, not_empty_;
  std::deque<T> items_;
  bool closed_ = false;
  std::size_t max_depth_ = 0, blocked_pushes_ = 0, blocked_pops_ = 0;
};

// Closes the queue when it goes out of scope: the consumer is told "no more" even if a producer
// throws, so no thread waits forever on a queue nobody will fill.
template <class T>
struct CloseOnExit {
  BoundedQueue<T>& queue;
  ~CloseOnExit() { queue.close(); }
};
// endregion

// region model
enum class Policy { Block, Drop };

struct Outcome {
  std::int64_t offered, served, dropped, ticks, blocked_ticks, depth_sum, wait_sum;
  std::size_t max_depth;
  double throughput() const { return double(served) / double(ticks); }
  double mean_depth() const { return double(depth_sum) / double(ticks); }  // L
  double mean_wait() const { return double(wait_sum) / double(served); }   // W, in ticks
};

// The producer makes a burst of `burst` items every `period` ticks; the consumer serves one item a
// tick. Items wait in a queue of `capacity`. Under Block, an item that finds the queue full stays
// with the producer, which is stuck in push (a blocked tick) and makes no new burst until it has
// pushed the last one: it is slowed to the consumer's pace. Under Drop the item is lost and the
// producer keeps its pace. After `periods` bursts the queue drains, so every item that entered it
// is served and Little's law, L = throughput x W, holds exactly.
Outcome simulate(int burst, int period, std::size_t capacity, Policy policy, int periods) {
  std::deque<std::int64_t> queue;  // the tick each waiting item entered
  Outcome out{};
  std::int64_t backlog = 0;     // items the blocked producer still holds (Block only)
  std::int64_t next_burst = 0;  // the first tick the producer may make its next burst
  int bursts = 0;
  for (std::int64_t tick = 0;; ++tick) {
    if (bursts < periods && tick >= next_burst && backlog == 0) {
      out.offered += burst;
      backlog += burst;
      next_burst = tick + period;
      ++bursts;
    }
    while (backlog > 0 && queue.size() < capacity) {
      queue.push_back(tick);
      --backlog;
    }
    if (policy == Policy::Drop) {
      out.dropped += backlog;
      backlog = 0;
    }
    if (queue.size() > out.max_depth) out.max_depth = queue.size();
    if (!queue.empty()) {  // serve one
      out.wait_sum += tick - queue.front();
      queue.pop_front();
      ++out.served;
    }
    if (backlog > 0) ++out.blocked_ticks;
    out.depth_sum += std::int64_t(queue.size());  // items still waiting at the tick's end
    if (bursts == periods && queue.empty() && backlog == 0) {
      out.ticks = tick + 1;
      return out;
    }
  }
}
// endregion

// region threads
struct Item {
  int producer, seq;
};

// Two producers push `per_producer` items each through a queue of `capacity`; one consumer pops
// them. Returns whether every item arrived exactly once and each producer's items came in order.
bool run_threads(int per_producer, std::size_t capacity, BoundedQueue<Item>::Stats& stats, double& seconds) {
  BoundedQueue<Item> queue(capacity);
  std::vector<int> next(2, 0);  // the next seq expected from each producer
  bool in_order = true;
  int received = 0;
  auto start = std::chrono::steady_clock::now();
  std::thread consumer([&] {
    while (auto item = queue.pop()) {
      in_order = in_order && item->seq == next[item->producer];
      next[item->producer] = item->seq + 1;
      ++received;
    }
  });
  {
    CloseOnExit<Item> closer{queue};
    std::vector<std::jthread> producers;
    for (int p = 0; p < 2; ++p) {
      producers.emplace_back([&queue, p, per_producer] {
        for (int seq = 0; seq < per_producer; ++seq) queue.push(Item{p, seq});
      });
    }
  }  // the jthreads join here, then the closer closes the queue
  consumer.join();
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats = queue.stats();
  return in_order && received == 2 * per_producer && next[0] == per_producer && next[1] == per_producer;
}
// endregion

// 12000 → "12,000": the page quotes counts as people write them.
std::string with_commas(long long n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

int main() {
  const int period = 8, periods = 1000;
  const std::size_t capacity = 16;
  std::printf("model: a burst every %d ticks, one item served a tick, capacity %zu, %d bursts\n", period, capacity, periods);
  std::printf("%5s %6s %8s %10s %7s %7s %9s %8s %8s %4s\n", "load", "policy", "offered", "throughput", "L", "W", "lambda*W", "dropped", "blocked", "max");
  for (int burst : {4, 8, 12, 16}) {
    for (Policy policy : {Policy::Block, Policy::Drop}) {
      Outcome o = simulate(burst, period, capacity, policy, periods);
      std::printf("%5.2f %6s %8.3f %10.3f %7.3f %7.3f %9.3f %8s %7.1f%% %4zu\n", double(burst) / period,
                  policy == Policy::Block ? "block" : "drop", double(o.offered) / double(o.ticks), o.throughput(), o.mean_depth(), o.mean_wait(), o.throughput() * o.mean_wait(),
                  with_commas(o.dropped).c_str(), 100.0 * double(o.blocked_ticks) / double(o.ticks), o.max_depth);
    }
  }
  Outcome over = simulate(12, period, capacity, Policy::Drop, periods);
  std::printf("at load 1.50, dropping loses %s of %s offered items (%.1f%%)\n", with_commas(over.dropped).c_str(), with_commas(over.offered).c_str(),
              100.0 * double(over.dropped) / double(over.offered));

  BoundedQueue<Item>::Stats stats{};
  double seconds = 0;
  const int per_producer = 100000;
  bool ok = run_threads(per_producer, 8, stats, seconds);
  std::printf("threads: 2 producers x %s items through a queue of 8: %s\n", with_commas(per_producer).c_str(),
              ok ? "every item once, each producer's in order" : "LOST OR REORDERED ITEMS");
  std::printf("threads: max depth %zu (<= 8: %s); pushes that blocked %zu, pops that blocked %zu\n", stats.max_depth,
              stats.max_depth <= 8 ? "yes" : "NO", stats.blocked_pushes, stats.blocked_pops);
  std::printf("threads: %.2f M items/s on this machine (measured, varies run to run)\n", 2.0 * per_producer / seconds / 1e6);
  return ok && stats.max_depth <= 8 ? 0 : 1;
}
