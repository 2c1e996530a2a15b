// The pread/pwrite request queue (disk_queue.h): where io_uring is
// unavailable, worker threads do the same work.
#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <thread>
#include <vector>

#include "core/thread_name.h"
#include "offload/disk_queue.h"

namespace strata::disk_detail {

int thread_queue_threads(const DiskIoOptions& o) {
  return std::min(o.queue_depth, 64);
}

namespace {

class ThreadQueue final : public Queue {
 public:
  explicit ThreadQueue(const DiskIoOptions& o) : Queue(o) {
    const int n = thread_queue_threads(o);
    for (int i = 0; i < n; ++i) workers_.emplace_back([this] { work(); });
  }

  ~ThreadQueue() override {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }

  void push(std::shared_ptr<RequestState> r) override {
    {
      std::lock_guard lk(mu_);
      queue_pending(pending_, std::move(r));
    }
    cv_.notify_one();
  }

  const char* name() const override { return "threads"; }

 private:
  void work() {
    name_this_thread("disk io");
    AlignedBuffer bounce(opt_.chunk_bytes);
    Chunk c;
    for (;;) {
      {
        std::unique_lock lk(mu_);
        for (;;) {
          cv_.wait(lk, [&] { return stop_ || !pending_.empty(); });
          if (pending_.empty()) return;  // stopping, nothing left
          if (cut_next(pending_.front(), c, bounce.data())) break;
          pending_.pop_front();
        }
        if (!pending_.empty()) cv_.notify_one();  // more to cut: wake a peer
      }
      io_started();
      const bool ok = run(c);
      io_ended();
      finish_chunk(c, ok);
    }
  }

  bool run(Chunk& c) {
    before_first_io(c);
    for (;;) {
      const ssize_t r =
          c.req->op == Op::kRead
              ? ::pread(io_fd(c), io_addr(c), io_left(c), static_cast<off_t>(io_pos(c)))
              : ::pwrite(io_fd(c), io_addr(c), io_left(c), static_cast<off_t>(io_pos(c)));
      const Step st = after_io(c, r < 0 ? -static_cast<int64_t>(errno) : static_cast<int64_t>(r));
      if (st != Step::kResubmit) return st == Step::kDone;
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<Queue> make_thread_queue(const DiskIoOptions& o) {
  return std::make_unique<ThreadQueue>(o);
}

}  // namespace strata::disk_detail
