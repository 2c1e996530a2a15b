// The batch-job driver (driver.h).
#include "generate/driver.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "generate/chat_template.h"
#include "generate/drafter.h"
#include "generate/ngram_draft.h"
#include "generate/openai_response.h"
#include "generate/stop.h"
#include "io/one_line.h"
#include "kv/shared_prefix.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace strata {
namespace {

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::string id_text(const nlohmann::json& id) {
  return one_line(id.dump(), 80);
}

std::string format_duration(double s) {
  if (!(s >= 0) || s > 1e8) return "--";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}h{:02}m", t / 3600, (t / 60) % 60);
  if (t >= 60) return fmt::format("{}m{:02}s", t / 60, t % 60);
  return fmt::format("{}s", t);
}

// One sequence of a running block.
struct SeqState {
  const Job* job;
  SeqSampler sampler;
  StopChecker stop;
  std::vector<int32_t> context;  // prompt and output so far (speculation only)
  std::vector<int32_t> draft;    // the draft tokens last proposed
  int32_t draft_len = 0;         // how many to propose next (adapted to acceptance)
};

}  // namespace

std::unique_ptr<Tokenizer> tokenizer_for(const Model& model) {
  if (model.gguf()) return Tokenizer::from_gguf(*model.gguf());
  return Tokenizer::from_path(model.desc().path);
}

DType choose_compute_dtype(std::string_view requested, bool native_bf16) {
  if (requested == "f32") return DType::kF32;
  if (requested == "bf16") return DType::kBF16;
  if (requested == "int8") return DType::kI8;  // int8 products for quantized weights (CPU)
  if (!requested.empty()) {
    fail("--compute-dtype {} is not supported; use f32, bf16 or int8", one_line(requested, 40));
  }
  if (native_bf16) {
    spdlog::info(
        "compute dtype bf16: the CPU multiplies bf16 natively (--compute-dtype f32 to change)");
    return DType::kBF16;
  }
  spdlog::info("compute dtype f32: the CPU has no native bf16 (AVX512_BF16 or AMX)");
  return DType::kF32;
}

std::string model_identity(const Model& model, bool with_mtime) {
  // File names, not paths: the same model reached by another path is the same.
  std::string id;
  for (const SourceFile& f : model.desc().files) {
    id += fmt::format("{}:{}", std::filesystem::path(f.path).filename().string(), f.size);
    id += with_mtime ? fmt::format(":{}|", f.mtime_ns) : "|";
  }
  return id;
}

namespace {

// The chat template for --chat, or for the chat requests of an OpenAI batch
// file. With --chat a template that cannot be used fails the run; for OpenAI
// requests it becomes their error (returned in `problem`).
std::optional<ChatTemplate> chat_template_for(const PromptFile& prompts, const Tokenizer& tokenizer,
                                              const GenerateOptions& options,
                                              const std::string& model_name, std::string& problem) {
  const bool openai_chat =
      std::any_of(prompts.prompts.begin(), prompts.prompts.end(), [](const PromptRecord& p) {
        return p.endpoint == Endpoint::kChatCompletions && p.error_code.empty();
      });
  if (!options.chat && !openai_chat) return std::nullopt;
  try {
    ChatTemplate chat = ChatTemplate::for_model(tokenizer, model_name, options.chat_template_file);
    spdlog::info("chat template: {}", chat.origin());
    return chat;
  } catch (const Error& e) {
    if (options.chat) throw;
    problem = e.what();
    spdlog::warn("chat requests are answered with an error: {}", problem);
    return std::nullopt;
  }
}

}  // namespace

std::vector<Job> prepare_jobs(const PromptFile& prompts, const Tokenizer& tokenizer, int64_t n_ctx,
                              const GenerateOptions& options, const std::string& model_name) {
  STRATA_ASSERT(n_ctx > 0);
  options.sampling.validate();
  if (options.max_new_tokens < 1) {
    fail("--max-new-tokens {} is not allowed; use 1 or more", options.max_new_tokens);
  }
  for (const std::string& s : options.stop) {
    if (s.empty()) fail("--stop \"\" is not allowed; a stop string needs at least one character");
  }
  const bool openai = prompts.format == PromptFormat::kOpenAi;
  if (openai && (options.chat || options.system)) {
    fail(
        "{}: is an OpenAI batch file, whose requests say themselves whether they are chat "
        "(url /v1/chat/completions, with their own system message); drop --chat and --system",
        prompts.path);
  }
  std::string chat_problem;
  const std::optional<ChatTemplate> chat =
      chat_template_for(prompts, tokenizer, options, model_name, chat_problem);
  std::vector<Job> jobs;
  jobs.reserve(prompts.prompts.size());
  size_t n_skipped = 0, n_errors = 0;
  std::string first_error;
  auto answer_with_error = [&](Job& job, std::string code, std::string message) {
    job.error_code = std::move(code);
    job.skipped = std::move(message);
    if (n_errors++ == 0) first_error = job.skipped;
  };
  for (const PromptRecord& p : prompts.prompts) {
    Job job;
    job.index = p.index;
    job.id = p.id;
    job.endpoint = p.endpoint;
    if (!p.error_code.empty()) {
      answer_with_error(job, p.error_code, p.error);
      jobs.push_back(std::move(job));
      continue;
    }
    job.sampling = options.sampling;
    if (p.temperature) job.sampling.temperature = *p.temperature;
    if (p.top_p) job.sampling.top_p = *p.top_p;
    job.seed = p.seed;
    job.stop = p.stop ? *p.stop : options.stop;
    if (p.endpoint == Endpoint::kChatCompletions) {
      if (!chat) {
        answer_with_error(job, "chat_template_error", chat_problem);
        jobs.push_back(std::move(job));
        continue;
      }
      try {
        job.tokens = tokenizer.encode(chat->render(p.messages), /*add_bos=*/false);
      } catch (const Error& e) {
        answer_with_error(job, "chat_template_error", fmt::format("line {}: {}", p.line, e.what()));
        jobs.push_back(std::move(job));
        continue;
      }
    } else if (options.chat) {
      const std::optional<std::string>& system = p.system ? p.system : options.system;
      try {
        job.tokens = tokenizer.encode(chat->render(system, p.text), /*add_bos=*/false);
      } catch (const Error& e) {
        fail("{}:{}: prompt id {}: {}", prompts.path, p.line, id_text(p.id), e.what());
      }
    } else {
      job.tokens = tokenizer.encode(p.text, tokenizer.add_bos_default());
    }
    if (job.tokens.empty()) {
      if (!openai) {
        fail("{}:{}: prompt id {} is empty after tokenization; remove the line or give it text",
             prompts.path, p.line, id_text(p.id));
      }
      answer_with_error(job, "invalid_request",
                        fmt::format("line {}: the prompt is empty after tokenization", p.line));
      jobs.push_back(std::move(job));
      continue;
    }
    const int64_t n_prompt = static_cast<int64_t>(job.tokens.size());
    const int32_t wanted = p.max_new_tokens ? *p.max_new_tokens : options.max_new_tokens;
    if (n_prompt >= n_ctx && openai) {
      answer_with_error(job, "context_length_exceeded",
                        fmt::format("line {}: the prompt has {} tokens, but the context of the "
                                    "model holds {} and at least one must be left to generate",
                                    p.line, n_prompt, n_ctx));
    } else if (n_prompt >= n_ctx) {
      const std::string why = fmt::format(
          "prompt id {} ({}:{}) has {} tokens{}, but the context of {} holds {} tokens and at "
          "least one must be left to generate",
          id_text(p.id), prompts.path, p.line, n_prompt,
          options.chat ? " with the chat template" : "", model_name, n_ctx);
      if (!options.skip_long) fail("{}; shorten it, or pass --skip-long to skip such prompts", why);
      spdlog::warn("skipping: {}", why);
      job.skipped = fmt::format("prompt has {} tokens; the context holds {}", n_prompt, n_ctx);
      ++n_skipped;
    } else {
      job.max_new_tokens = static_cast<int32_t>(std::min<int64_t>(wanted, n_ctx - n_prompt));
    }
    jobs.push_back(std::move(job));
  }
  if (n_skipped > 0) spdlog::warn("{} prompts skipped: longer than the context", n_skipped);
  if (n_errors > 0) {
    spdlog::warn("{} of {} requests are answered with an error; the first: {}", n_errors,
                 jobs.size(), one_line(first_error, 300));
  }
  return jobs;
}

namespace {

// The order plan_blocks cuts into blocks.
std::vector<size_t> block_order(std::span<const Job> jobs, const std::function<bool(size_t)>& skip,
                                int64_t shared_page) {
  std::vector<size_t> order;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (!skip(i)) order.push_back(i);
  }
  if (shared_page > 0) {
    std::vector<std::span<const int32_t>> prompts;
    for (size_t i : order) prompts.emplace_back(jobs[i].tokens);
    std::vector<size_t> sorted = order_for_sharing(prompts, shared_page);
    for (size_t& k : sorted) k = order[k];
    order = std::move(sorted);
  } else {
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return jobs[a].tokens.size() > jobs[b].tokens.size();
    });
  }
  return order;
}

}  // namespace

std::vector<std::vector<size_t>> plan_blocks(std::span<const Job> jobs, int64_t block_size,
                                             const std::function<bool(size_t)>& skip,
                                             int64_t shared_page) {
  STRATA_ASSERT(block_size >= 1);
  const std::vector<size_t> order = block_order(jobs, skip, shared_page);
  std::vector<std::vector<size_t>> blocks;
  for (size_t i = 0; i < order.size(); i += static_cast<size_t>(block_size)) {
    const size_t end = std::min(order.size(), i + static_cast<size_t>(block_size));
    blocks.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(i),
                        order.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return blocks;
}

namespace {

// The KV sharing every block guarantees, from each distinct block's pages
// referenced per sequence (descending): the pages p and the sequences m with
// p or more referenced pages in every block, p chosen for the most m x p.
PlanSharing kv_stored_once(const std::set<std::vector<int64_t>>& blocks) {
  std::set<int64_t> candidates;
  for (const std::vector<int64_t>& b : blocks) {
    for (const int64_t p : b) {
      if (p > 0 && p < std::numeric_limits<int64_t>::max()) candidates.insert(p);
    }
  }
  PlanSharing best;
  for (const int64_t p : candidates) {
    auto m = std::numeric_limits<int64_t>::max();
    for (const std::vector<int64_t>& b : blocks) {
      const auto at_least = std::upper_bound(b.begin(), b.end(), p, std::greater<>()) - b.begin();
      m = std::min<int64_t>(m, at_least);
    }
    if (m * p > best.seqs * best.pages) best = {m, p};
  }
  return best;
}

}  // namespace

std::function<SharingRates(int64_t)> planned_sharing(std::span<const Job> jobs,
                                                     const std::function<bool(size_t)>& skip,
                                                     int64_t shared_page, bool kept_across_blocks) {
  if (shared_page <= 0) return [](int64_t) { return SharingRates{}; };
  struct State {
    std::vector<std::span<const int32_t>> prompts;  // in block order
    int64_t page = 0;
    bool keep = false;
    std::map<int64_t, SharingRates> by_size;
  };
  auto st = std::make_shared<State>();
  st->page = shared_page;
  st->keep = kept_across_blocks;
  for (size_t i : block_order(jobs, skip, shared_page)) st->prompts.emplace_back(jobs[i].tokens);
  return [st](int64_t block_size) {
    STRATA_ASSERT(block_size >= 1);
    if (auto it = st->by_size.find(block_size); it != st->by_size.end()) return it->second;
    // As the engine groups a block's prompts (offload/block_state.cpp): each
    // group's prefix is computed once by a prefix step and taken by all its
    // members, or taken by all from the prefix kept from the block before
    // (or, where it begins with part of that, computed from there on).
    double shared = 0, step_tokens = 0;
    int64_t steps = 0, blocks = 0;
    const auto n = static_cast<int64_t>(st->prompts.size());
    std::set<std::vector<int64_t>> refs;  // each block's referenced pages (descending)
    std::span<const int32_t> kept;        // the prefix kept from the block before
    for (int64_t i = 0; i < n; i += block_size, ++blocks) {
      const auto block =
          std::span(st->prompts)
              .subspan(static_cast<size_t>(i), static_cast<size_t>(std::min(block_size, n - i)));
      const std::vector<PrefixGroup> groups = find_prefix_groups(block, st->page);
      std::vector<int64_t> r = referenced_pages(groups, block.size(), st->page);
      // A short block's missing sequences store nothing: as if they took all.
      r.resize(static_cast<size_t>(block_size), std::numeric_limits<int64_t>::max());
      std::sort(r.begin(), r.end(), std::greater<>());
      refs.insert(std::move(r));
      const KeptTake take = take_from_kept(groups, block, kept, st->page);
      std::vector<uint8_t> computed;
      for (size_t g = 0; g < groups.size(); ++g) {
        const int64_t tokens = groups[g].tokens;
        computed.push_back(take.computes(groups[g], g, st->page) ? 1 : 0);
        shared += static_cast<double>(tokens) * static_cast<double>(groups[g].members.size());
        const int64_t taken = take.taken(g) * st->page;
        if (computed.back() != 0) step_tokens += static_cast<double>(tokens - taken);
      }
      kept = kept.first(static_cast<size_t>(take.most * st->page));
      if (std::find(computed.begin(), computed.end(), 1) == computed.end()) continue;
      ++steps;
      const int64_t keep = st->keep ? group_to_keep(groups, computed) : -1;
      if (keep >= 0) {
        const PrefixGroup& g = groups[static_cast<size_t>(keep)];
        kept = block[g.members.front()].first(static_cast<size_t>(g.tokens));
      }
    }
    SharingRates r;
    if (shared > 0) {
      r.shared_tokens = shared / static_cast<double>(n);
      r.prefix_step_tokens = steps > 0 ? step_tokens / static_cast<double>(steps) : 0;
      r.prefix_steps = static_cast<double>(steps) / static_cast<double>(blocks);
      r.kv = kv_stored_once(refs);
    }
    st->by_size.emplace(block_size, r);
    return r;
  };
}

OrderedJson make_record(const Job& job, const std::string& completion,
                        std::span<const int32_t> completion_ids, const char* finish_reason,
                        const GenerateOptions& options) {
  if (job.endpoint != Endpoint::kNone || !job.error_code.empty()) {
    return openai_answer(job, completion, completion_ids.size(), finish_reason,
                         options.response_model, static_cast<int64_t>(std::time(nullptr)));
  }
  OrderedJson r;
  r["id"] = job.id;
  r["completion"] = completion;
  r["prompt_tokens"] = job.tokens.size();
  r["completion_tokens"] = completion_ids.size();
  r["finish_reason"] = finish_reason;
  if (!job.skipped.empty()) r["error"] = job.skipped;
  if (options.ids)
    r["completion_ids"] = std::vector<int32_t>(completion_ids.begin(), completion_ids.end());
  return r;
}

RunSummary run_jobs(Engine& engine, const Tokenizer& tokenizer, std::span<const Job> jobs,
                    const GenerateOptions& options, RecordSink* out, Drafter* drafter) {
  RunSummary summary;
  // Speculation proposes by prompt lookup unless the caller brings a drafter.
  NgramDrafter ngram;
  Drafter* const drafts = options.speculate_tokens > 0 ? (drafter ? drafter : &ngram) : nullptr;
  std::vector<Drafter::Request> requests;
  std::vector<size_t> asking;  // the first row of each request's sequence
  std::vector<std::vector<int32_t>> proposals;
  auto done_before = [&](size_t i) { return out && out->is_done(jobs[i].index); };

  // Skipped prompts get their record before any compute.
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (!jobs[i].skipped.empty() && out && !done_before(i)) {
      out->append(jobs[i].index, make_record(jobs[i], "", {}, "skipped", options));
    }
  }
  const auto blocks = plan_blocks(
      jobs, engine.block_size(),
      [&](size_t i) { return done_before(i) || !jobs[i].skipped.empty(); },
      engine.shared_prefix_page());

  const int64_t n_vocab_model = engine.config().n_vocab;
  // Ids past the tokenizer's vocabulary (padding rows of the embedding) have
  // no text; they are never sampled.
  const int32_t n_sample =
      static_cast<int32_t>(std::min<int64_t>(n_vocab_model, tokenizer.n_vocab()));
  const std::vector<int32_t> eos =
      options.ignore_eos ? std::vector<int32_t>{} : tokenizer.eos_ids();

  size_t n_done = 0;
  for (size_t i = 0; i < jobs.size(); ++i) n_done += (out && out->is_done(jobs[i].index)) ? 1 : 0;
  Progress progress(options.progress, jobs.size(), n_done);
  const double t0 = now_s();

  for (const std::vector<size_t>& block : blocks) {
    std::vector<SeqInput> seqs;
    std::vector<SeqState> states;
    seqs.reserve(block.size());
    states.reserve(block.size());
    for (size_t i : block) {
      const Job& job = jobs[i];
      seqs.push_back({job.tokens, job.max_new_tokens});
      // A request with its own seed has its own stream, whatever its position.
      const SeqSampler sampler = job.seed
                                     ? SeqSampler(job.sampling, *job.seed, 0, n_sample)
                                     : SeqSampler(job.sampling, options.seed, job.index, n_sample);
      states.push_back(
          {&job, sampler, StopChecker(tokenizer, eos, job.stop, job.max_new_tokens), {}, {}});
      states.back().sampler.observe(job.tokens);
      if (options.speculate_tokens > 0) {
        states.back().context = job.tokens;
        states.back().draft_len = options.speculate_tokens;
      }
    }
    summary.n_sequences += static_cast<int64_t>(seqs.size());
    if (drafts) drafts->begin_block(seqs, options.speculate_tokens);
    engine.run_block(seqs, [&](int /*step*/, std::span<const int32_t> active, const float* logits,
                               std::span<SeqAction> actions) {
      STRATA_ASSERT(actions.size() == active.size());
      // A sequence's rows are consecutive: one per token it was fed.
      for (size_t r = 0, n = 1; r < active.size(); r += n) {
        STRATA_ASSERT(active[r] >= 0 && static_cast<size_t>(active[r]) < states.size());
        n = 1;
        while (r + n < active.size() && active[r + n] == active[r]) ++n;
        SeqState& st = states[active[r]];
        STRATA_ASSERT_MSG(!st.stop.finished(), "the engine stepped a finished sequence ({})",
                          active[r]);
        STRATA_ASSERT(n - 1 <= st.draft.size());
        SeqAction& action = actions[r];
        FinishReason reason = FinishReason::kNone;
        // Row i follows fed token i: its choice is kept, and row i + 1 read
        // only when the choice is the draft token fed next.
        for (size_t i = 0; i < n; ++i) {
          const std::span<const float> row(logits + static_cast<int64_t>(r + i) * n_vocab_model,
                                           static_cast<size_t>(n_sample));
          const int32_t token = st.sampler.sample(row);
          reason = st.stop.push(token);
          ++summary.generated_tokens;
          action.next_token = token;
          action.accepted = static_cast<int32_t>(i);
          if (options.speculate_tokens > 0) st.context.push_back(token);
          if (reason != FinishReason::kNone || i + 1 == n || token != st.draft[i]) break;
        }
        action.finished = reason != FinishReason::kNone;
        if (action.finished) {
          if (out) {
            out->append(st.job->index, make_record(*st.job, st.stop.text(), st.stop.ids(),
                                                   finish_reason_name(reason), options));
          }
          ++summary.n_prompts;
          ++n_done;
          if (drafts) drafts->finished(active[r]);
        } else if (drafts) {
          // Longer drafts while they are all accepted, shorter after a
          // rejection: rows that are rejected cost compute.
          if (n > 1) {
            st.draft_len = action.accepted + 1 == static_cast<int32_t>(n)
                               ? std::min(options.speculate_tokens, st.draft_len + 2)
                               : std::max(1, st.draft_len - 1);
          }
          requests.push_back({active[r], st.context, st.draft_len});
          asking.push_back(r);
        }
      }
      // Every sequence that goes on asks in one call (a draft model runs
      // them as one batch).
      if (!requests.empty()) {
        proposals.resize(requests.size());
        drafts->propose(requests, std::span(proposals).first(requests.size()));
        for (size_t i = 0; i < requests.size(); ++i) {
          SeqState& st = states[static_cast<size_t>(requests[i].seq)];
          std::vector<int32_t>& d = proposals[i];
          if (static_cast<int64_t>(d.size()) > requests[i].k)
            d.resize(static_cast<size_t>(requests[i].k));
          st.draft = d;
          actions[asking[i]].draft = std::move(d);
        }
        requests.clear();
        asking.clear();
      }
      progress.update(n_done, summary.generated_tokens);
    });
    for (const SeqState& st : states) {
      STRATA_ASSERT_MSG(st.stop.finished(), "run_block returned before prompt index {} finished",
                        st.job->index);
    }
  }
  summary.total_s = now_s() - t0;
  progress.finish();
  if (out) out->finish();
  return summary;
}

std::vector<Job> synthetic_jobs(const Tokenizer& tokenizer, int64_t n_vocab, int64_t n_prompts,
                                int64_t prompt_len, int32_t gen_len, int64_t shared_len) {
  STRATA_ASSERT(n_prompts >= 1 && prompt_len >= 1 && gen_len >= 1);
  STRATA_ASSERT(shared_len >= 0 && shared_len <= prompt_len);
  const int64_t n = std::min<int64_t>(n_vocab, tokenizer.n_vocab());
  std::vector<int32_t> pool;
  for (int32_t id = 0; id < n; ++id) {
    if (!tokenizer.is_special(id)) pool.push_back(id);
  }
  if (pool.empty())
    fail("the tokenizer of this model has no ordinary tokens to build prompts from");
  SeqRng rng(0x5eed, 0), shared_rng(0x5eed, 1);
  std::vector<int32_t> shared(static_cast<size_t>(shared_len));
  for (int32_t& t : shared) t = pool[shared_rng.next_u64() % pool.size()];
  std::vector<Job> jobs(static_cast<size_t>(n_prompts));
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job& job = jobs[i];
    job.index = i;
    job.id = i;
    job.max_new_tokens = gen_len;
    job.tokens = shared;
    job.tokens.resize(static_cast<size_t>(prompt_len));
    for (size_t t = shared.size(); t < job.tokens.size(); ++t) {
      job.tokens[t] = pool[rng.next_u64() % pool.size()];
    }
  }
  return jobs;
}

uint64_t settings_hash(const GenerateOptions& o, const std::string& model_identity,
                       const std::string& compute) {
  OrderedJson j;
  j["model"] = model_identity;
  j["compute"] = compute;
  j["temperature"] = o.sampling.temperature;
  j["top_k"] = o.sampling.top_k;
  j["top_p"] = o.sampling.top_p;
  j["repetition_penalty"] = o.sampling.repetition_penalty;
  j["seed"] = o.seed;
  j["max_new_tokens"] = o.max_new_tokens;
  j["stop"] = o.stop;
  j["chat"] = o.chat;
  j["system"] = o.system ? OrderedJson(*o.system) : OrderedJson();
  j["ids"] = o.ids;
  j["skip_long"] = o.skip_long;
  j["ignore_eos"] = o.ignore_eos;
  j["response_model"] = o.response_model;
  // The template's text, not its path: an edited template renders other prompts.
  if (!o.chat_template_file.empty()) {
    std::ifstream in(o.chat_template_file, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    j["chat_template"] = fmt::format("{:016x}", fnv1a64(ss.str()));
  }
  return fnv1a64(j.dump(-1, ' ', false, OrderedJson::error_handler_t::replace));
}

bool stderr_is_tty() {
  return ::isatty(STDERR_FILENO) == 1;
}

Progress::Progress(bool enabled, size_t total, size_t done_before, double line_every_s)
    : enabled_(enabled),
      total_(total),
      done_before_(done_before),
      line_every_s_(line_every_s),
      start_s_(now_s()) {}

void Progress::update(size_t done, int64_t generated_tokens) {
  if (!enabled_) return;
  const double t = now_s();
  const double every = line_every_s_ > 0 ? line_every_s_ : 0.25;
  if (last_draw_s_ >= 0 && t - last_draw_s_ < every && done < total_) return;
  if (line_every_s_ > 0 && last_draw_s_ < 0 && done < total_) {
    last_draw_s_ = t;  // the first line after one period, not at the first record
    return;
  }
  last_draw_s_ = t;
  draw(done, generated_tokens);
}

void Progress::draw(size_t done, int64_t generated_tokens) {
  const double elapsed = now_s() - start_s_;
  const double tok_s = elapsed > 0 ? static_cast<double>(generated_tokens) / elapsed : 0;
  const size_t done_here = done - std::min(done, done_before_);
  std::string eta = "--";
  if (done_here > 0 && elapsed > 0) {
    eta = format_duration(static_cast<double>(total_ - std::min(done, total_)) * elapsed /
                          static_cast<double>(done_here));
  }
  if (line_every_s_ > 0) {
    std::fprintf(stderr, "prompts %zu/%zu  %.1f tok/s  ETA %s\n", done, total_, tok_s, eta.c_str());
  } else {
    std::fprintf(stderr, "\r\033[Kprompts %zu/%zu  %.1f tok/s  ETA %s", done, total_, tok_s,
                 eta.c_str());
    drawn_ = true;
  }
  std::fflush(stderr);
}

void Progress::finish() {
  if (!enabled_ || !drawn_) return;
  std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

}  // namespace strata
