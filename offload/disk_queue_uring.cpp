// The io_uring request queue (disk_queue.h): one thread owns the ring,
// submits chunks and reaps their completions. The only file in Strata that
// includes liburing.h.
#include <liburing.h>
#include <sys/eventfd.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <future>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/thread_name.h"
#include "offload/disk_queue.h"

namespace strata::disk_detail {

namespace {

class UringQueue final : public Queue {
 public:
  // Starts the ring thread; null (and `why`) when the ring cannot be set up.
  static std::unique_ptr<Queue> create(const DiskIoOptions& o, std::string* why) {
    std::unique_ptr<UringQueue> q(new UringQueue(o));
    std::promise<std::string> ready;
    std::future<std::string> result = ready.get_future();
    q->thread_ = std::thread([qp = q.get(), &ready] { qp->run(ready); });
    std::string err = result.get();
    if (!err.empty()) {
      q->thread_.join();
      *why = err;
      return nullptr;
    }
    return q;
  }

  ~UringQueue() override {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    if (efd_ >= 0) wake();
    if (thread_.joinable()) thread_.join();
    // Torn down here, after the join: the eventfd must outlive every wake().
    if (ring_ready_) io_uring_queue_exit(&ring_);
    if (efd_ >= 0) ::close(efd_);
  }

  void push(std::shared_ptr<RequestState> r) override {
    {
      std::lock_guard lk(mu_);
      incoming_.push_back(std::move(r));
    }
    wake();
  }

  const char* name() const override { return "io_uring"; }
  bool buffers_registered() const override { return registered_; }

 private:
  explicit UringQueue(const DiskIoOptions& o) : Queue(o) {}

  void wake() {
    const uint64_t one = 1;
    // A full counter (2^64 - 2 wake-ups pending) cannot happen; EINTR retries.
    while (::write(efd_, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
  }

  // Sets the ring up on this thread (the only one that will submit), reports
  // the outcome, then serves requests until stopped.
  void run(std::promise<std::string>& ready) {
    name_this_thread("disk ring");
    const int depth = opt_.queue_depth;
    io_uring_params p{};
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN;
    const unsigned entries = static_cast<unsigned>(depth) + 2;
    int ret = io_uring_queue_init_params(entries, &ring_, &p);
    if (ret == -EINVAL) {  // kernels before 6.0 lack these flags
      p = io_uring_params{};
      ret = io_uring_queue_init_params(entries, &ring_, &p);
    }
    if (ret < 0) {
      ready.set_value(fmt::format("io_uring_queue_init: {}", std::strerror(-ret)));
      return;
    }
    const int efd = ::eventfd(0, EFD_CLOEXEC);
    if (efd < 0) {
      const int e = errno;
      io_uring_queue_exit(&ring_);
      ready.set_value(fmt::format("eventfd: {}", std::strerror(e)));
      return;
    }
    efd_ = efd;
    slots_.resize(depth);
    bounce_.reserve(depth);
    for (int i = 0; i < depth; ++i) {
      bounce_.emplace_back(opt_.chunk_bytes);
      free_slots_.push_back(depth - 1 - i);
    }
    if (opt_.register_buffers) register_buffers();
    ring_ready_ = true;
    ready.set_value({});
    loop();
  }

  void register_buffers() {
    std::vector<iovec> iov;
    for (auto& b : bounce_) iov.push_back({b.data(), b.size()});
    for (auto& f : opt_.fixed_buffers) iov.push_back({f.data(), f.size()});
    const int ret =
        io_uring_register_buffers(&ring_, iov.data(), static_cast<unsigned>(iov.size()));
    if (ret < 0) {
      spdlog::info("io_uring: fixed buffers not registered ({}); the kernel pins pages per request",
                   std::strerror(-ret));
      return;
    }
    registered_ = true;
  }

  // The fixed-buffer index covering [addr, addr + n), or -1.
  int fixed_index(int slot, const Chunk& c, const std::byte* addr, size_t n) const {
    if (!registered_) return -1;
    if (c.bounce) return slot;
    for (size_t k = 0; k < opt_.fixed_buffers.size(); ++k) {
      const auto& f = opt_.fixed_buffers[k];
      if (addr >= f.data() && addr < f.data() + f.size() &&
          n <= static_cast<size_t>(f.data() + f.size() - addr)) {
        return static_cast<int>(bounce_.size() + k);
      }
    }
    return -1;
  }

  io_uring_sqe* get_sqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) {
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    STRATA_ASSERT(sqe != nullptr);
    return sqe;
  }

  void arm_wakeup() {
    io_uring_sqe* sqe = get_sqe();
    io_uring_prep_read(sqe, efd_, &efd_value_, sizeof(efd_value_), 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
  }

  void prep(int slot) {
    Chunk& c = slots_[slot];
    if (c.io_done == 0) before_first_io(c);
    io_uring_sqe* sqe = get_sqe();
    std::byte* addr = io_addr(c);
    const unsigned n = static_cast<unsigned>(io_left(c));
    const int fixed = fixed_index(slot, c, addr, n);
    if (c.req->op == Op::kRead) {
      if (fixed >= 0)
        io_uring_prep_read_fixed(sqe, io_fd(c), addr, n, io_pos(c), fixed);
      else
        io_uring_prep_read(sqe, io_fd(c), addr, n, io_pos(c));
    } else {
      if (fixed >= 0)
        io_uring_prep_write_fixed(sqe, io_fd(c), addr, n, io_pos(c), fixed);
      else
        io_uring_prep_write(sqe, io_fd(c), addr, n, io_pos(c));
    }
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot) + 1);
  }

  void loop() {
    arm_wakeup();
    for (;;) {
      bool stop;
      {
        std::lock_guard lk(mu_);
        for (auto& r : incoming_) queue_pending(pending_, std::move(r));
        incoming_.clear();
        stop = stop_;
      }
      for (int s : resubmit_) prep(s);
      resubmit_.clear();
      while (!free_slots_.empty() && !pending_.empty()) {
        const int s = free_slots_.back();
        if (!cut_next(pending_.front(), slots_[s], bounce_[s].data())) {
          pending_.pop_front();
          continue;
        }
        free_slots_.pop_back();
        ++n_in_flight_;
        io_started();
        prep(s);
      }
      if (stop && pending_.empty() && n_in_flight_ == 0) break;
      const int ret = io_uring_submit_and_wait(&ring_, 1);
      STRATA_ASSERT_MSG(ret >= 0 || ret == -EINTR || ret == -EAGAIN || ret == -EBUSY,
                        "io_uring_submit_and_wait: {}", std::strerror(-ret));
      unsigned head, seen = 0;
      io_uring_cqe* cqe;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        const uint64_t tag = io_uring_cqe_get_data64(cqe);
        if (tag == kWakeTag) {
          arm_wakeup();
          continue;
        }
        const int s = static_cast<int>(tag - 1);
        const Step st = after_io(slots_[s], cqe->res);
        if (st == Step::kResubmit) {
          resubmit_.push_back(s);
          continue;
        }
        // The busy time ends before the waiter is released (as on the
        // thread queue), so stats read after a wait count all of it.
        io_ended();
        finish_chunk(slots_[s], st == Step::kDone);
        free_slots_.push_back(s);
        --n_in_flight_;
      }
      io_uring_cq_advance(&ring_, seen);
    }
  }

  static constexpr uint64_t kWakeTag = 0;

  std::thread thread_;
  io_uring ring_{};
  int efd_ = -1;             // set before `ready`, closed by the destructor
  bool ring_ready_ = false;  // the ring is set up (torn down by the destructor)
  uint64_t efd_value_ = 0;
  bool registered_ = false;

  std::mutex mu_;  // guards incoming_ and stop_
  std::deque<std::shared_ptr<RequestState>> incoming_;
  bool stop_ = false;

  // Ring thread only.
  std::deque<Pending> pending_;
  std::vector<Chunk> slots_;
  std::vector<AlignedBuffer> bounce_;  // one per slot
  std::vector<int> free_slots_;
  std::vector<int> resubmit_;
  int n_in_flight_ = 0;
};

}  // namespace

std::unique_ptr<Queue> make_uring_queue(const DiskIoOptions& o, std::string* why) {
  return UringQueue::create(o, why);
}

}  // namespace strata::disk_detail
