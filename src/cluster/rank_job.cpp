#include "cluster/rank_job.h"

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "cluster/job_shares.h"
#include "core/error.h"

namespace strata {
namespace {

// The job's progress as a line on rank 0's stderr this often when that is
// not a terminal (a launcher forwards it; a cluster keeps it in a log).
constexpr double kProgressLineEvery = 30;

}  // namespace

// What run_jobs writes to on one rank: rank 0 appends to the output, its
// own records and, from a receiving thread, the other ranks'; the other ranks
// send theirs to rank 0.
class RankJob::Sink final : public RecordSink {
 public:
  Sink(MpiWorld& world, const std::vector<int>& owner, OutputFile* out, bool progress)
      : world_(world),
        owner_(owner),
        out_(out),
        progress_(world.rank() == 0, owner.size(), out ? out->n_done() : 0,
                  progress ? 0 : kProgressLineEvery) {
    if (world_.rank() == 0) {
      reports_.resize(static_cast<size_t>(world_.size()));
      receiver_ = std::thread([this] { receive(); });
    }
  }
  ~Sink() override {
    stop_ = true;
    if (receiver_.joinable()) receiver_.join();
  }

  bool is_done(size_t index) const override {
    STRATA_ASSERT(index < owner_.size());
    if (owner_[index] != world_.rank()) return true;
    return out_ && out_->is_done(index);
  }

  void append(size_t index, const OrderedJson& record) override {
    if (world_.rank() == 0) {
      std::lock_guard lock(mutex_);
      record_here(index, record);
      return;
    }
    const uint64_t i = index;
    std::string payload(sizeof i, '\0');
    std::memcpy(payload.data(), &i, sizeof i);
    payload += record.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);  // as OutputFile
    world_.send(0, kTagRecord, payload);
  }

  // Rank 0: waits for the last message of every other rank, then writes the
  // output. Elsewhere nothing: the report follows (finish_ranks).
  void finish() override {
    if (world_.rank() != 0) return;
    {
      std::unique_lock lock(mutex_);
      all_done_.wait(lock, [&] { return n_ranks_done_ == world_.size() - 1; });
    }
    receiver_.join();
    progress_.finish();
    out_->finish();
  }

  std::vector<nlohmann::ordered_json> take_reports() { return std::move(reports_); }

 private:
  // Rank 0 (holding the mutex): the record to the output, and the job's
  // progress line (every rank's records, tokens from the records).
  void record_here(size_t index, const OrderedJson& record) {
    out_->append(index, record);
    if (const auto it = record.find("completion_tokens"); it != record.end()) {
      tokens_ += it->get<int64_t>();
    } else if (const auto usage =
                   OrderedJson::json_pointer("/response/body/usage/completion_tokens");
               record.contains(usage)) {
      tokens_ += record.at(usage).get<int64_t>();
    }
    progress_.update(out_->n_done(), tokens_);
  }

  // Rank 0's receiving thread. A message it cannot use ends the whole job.
  void receive() {
    try {
      while (!stop_) {
        auto m = world_.poll();
        if (!m) {
          std::this_thread::sleep_for(MpiWorld::kPollInterval);
          continue;
        }
        if (m->tag == kTagRecord) {
          uint64_t index = 0;
          if (m->bytes.size() < sizeof index) fail("a record message of {} bytes", m->bytes.size());
          std::memcpy(&index, m->bytes.data(), sizeof index);
          if (index >= owner_.size() || owner_[index] != m->source) {
            fail("rank {} sent a record for prompt {}, which is not in its share", m->source,
                 index);
          }
          const auto record = OrderedJson::parse(m->bytes.begin() + sizeof index, m->bytes.end());
          std::lock_guard lock(mutex_);
          if (out_->is_done(index)) fail("rank {} sent prompt {} twice", m->source, index);
          record_here(index, record);
        } else if (m->tag == kTagDone) {
          std::lock_guard lock(mutex_);
          reports_[static_cast<size_t>(m->source)] = nlohmann::ordered_json::parse(m->bytes);
          if (++n_ranks_done_ == world_.size() - 1) {
            all_done_.notify_all();
            return;
          }
        } else {
          fail("rank {} sent a message with tag {}", m->source, m->tag);
        }
      }
    } catch (const std::exception& e) {
      std::fflush(stdout);
      std::fprintf(stderr, "strata: error: %s: receiving records: %s\n", world_.where().c_str(),
                   e.what());
      world_.abort(1);
    }
  }

  MpiWorld& world_;
  const std::vector<int>& owner_;
  OutputFile* out_;
  Progress progress_;
  int64_t tokens_ = 0;
  std::mutex mutex_;
  std::condition_variable all_done_;
  int n_ranks_done_ = 0;
  std::vector<nlohmann::ordered_json> reports_;
  std::atomic<bool> stop_ = false;
  std::thread receiver_;
};

RankJob::RankJob(MpiWorld& world, std::span<const Job> jobs, uint64_t job_hash,
                 const std::function<std::unique_ptr<OutputFile>()>& open_output, bool progress)
    : world_(world), progress_(progress) {
  for (size_t i = 0; i < jobs.size(); ++i) STRATA_ASSERT(jobs[i].index == i);
  const std::vector<uint64_t> hashes = world_.all_gather(job_hash);
  std::vector<int> differ;
  for (int r = 1; r < world_.size(); ++r) {
    if (hashes[static_cast<size_t>(r)] != hashes[0]) differ.push_back(r);
  }
  hosts_ = world_.all_hosts();
  const std::vector<std::string>& hosts = hosts_;
  if (!differ.empty()) {
    std::string names;
    for (int r : differ) {
      names +=
          fmt::format("{}{} on {}", names.empty() ? "" : ", ", r, hosts[static_cast<size_t>(r)]);
    }
    fail(
        "the ranks do not run the same job: rank {} has another prompt file, model or settings "
        "than rank 0 on {}; start every rank with the same command and files",
        names, hosts[0]);
  }
  std::string done(jobs.size(), '0');
  if (world_.rank() == 0) {
    out_ = open_output();
    for (size_t i = 0; i < jobs.size(); ++i) done[i] = out_->is_done(i) ? '1' : '0';
  }
  done = world_.broadcast(std::move(done));
  STRATA_ASSERT(done.size() == jobs.size());
  owner_ = assign_shares(jobs, world_.size(), [&](size_t i) { return done[i] == '1'; });
}

RankJob::~RankJob() = default;

size_t RankJob::n_hosts() const {
  return std::set<std::string>(hosts_.begin(), hosts_.end()).size();
}

void RankJob::first_on_host_then_others(const std::function<void()>& fn) {
  std::vector<int> here;  // the ranks of this host
  for (int r = 0; r < world_.size(); ++r) {
    if (hosts_[static_cast<size_t>(r)] == world_.host()) here.push_back(r);
  }
  STRATA_ASSERT(!here.empty());
  if (here.front() != world_.rank()) world_.wait_for(here.front(), kTagTurn);
  fn();
  if (here.front() == world_.rank()) {
    for (size_t k = 1; k < here.size(); ++k) world_.send(here[k], kTagTurn, "");
  }
}

RecordSink& RankJob::sink() {
  if (!sink_) sink_ = std::make_unique<Sink>(world_, owner_, out_.get(), progress_);
  return *sink_;
}

std::vector<nlohmann::ordered_json> RankJob::finish_ranks(const nlohmann::ordered_json& report) {
  if (world_.rank() != 0) {
    world_.send(0, kTagDone, report.dump(-1, ' ', false, OrderedJson::error_handler_t::replace));
    // Rank 0 says when the job is over; waiting sleeps, so it costs no core.
    world_.wait_for(0, kTagBye);
    return {};
  }
  std::vector<nlohmann::ordered_json> reports = sink_->take_reports();
  reports[0] = report;
  for (int r = 1; r < world_.size(); ++r) world_.send(r, kTagBye, "");
  return reports;
}

}  // namespace strata
