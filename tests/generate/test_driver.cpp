// The driver on a deterministic FakeEngine: records in input order with
// their fields, blocks of similar lengths, EOS and stop strings, per-prompt
// overrides, outputs independent of the block size and of the other prompts,
// resuming from OUTPUT.partial (and refusing a foreign one), unwritable
// outputs, prompts longer than the context, speculation and its drafters.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "core/error.h"
#include "generate/chat_template.h"
#include "generate/driver.h"
#include "generate/generate_test_util.h"
#include "generate/ngram_draft.h"
#include "generate/report.h"

namespace strata {
namespace {

using test::FakeEngine;
using test::fixture_tokenizer;
using test::read_lines;
using test::read_text;
using test::ScratchDir;
using test::write_text;

const char* kPrompts =
    "The quick brown fox\n"
    "Once upon a time, in a land far away, there lived a king\n"
    "\n"
    "Hello\n"
    "A list: one, two, three, four, five, six\n"
    "Why is the sky blue?\n";

int64_t vocab() {
  return fixture_tokenizer().n_vocab();
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

OutputIdentity identity_for(const PromptFile& pf, const GenerateOptions& o, size_t n) {
  return {pf.path, pf.content_hash, settings_hash(o, "fixture-model", "f32"), n};
}

// What `strata generate` does after loading the model.
RunSummary run_file(const std::string& prompts, const std::string& output, const GenerateOptions& o,
                    FakeEngine& engine, Drafter* drafter = nullptr) {
  const Tokenizer& tok = fixture_tokenizer();
  const PromptFile pf = read_prompt_file(prompts);
  const std::vector<Job> jobs = prepare_jobs(pf, tok, engine.config().n_ctx, o, "fixture-model");
  OutputFile out(output, identity_for(pf, o, jobs.size()));
  return run_jobs(engine, tok, jobs, o, &out, drafter);
}

std::vector<nlohmann::ordered_json> records(const std::string& path) {
  std::vector<nlohmann::ordered_json> out;
  for (const std::string& l : read_lines(path)) out.push_back(nlohmann::ordered_json::parse(l));
  return out;
}

GenerateOptions greedy(int32_t max_new = 8) {
  GenerateOptions o;
  o.max_new_tokens = max_new;
  o.ids = true;
  return o;
}

TEST(Driver, RecordsInInputOrderWithTheirFields) {
  ScratchDir dir;
  write_text(dir.file("p.txt"), kPrompts);
  FakeEngine engine(vocab(), /*block_size=*/2);
  const RunSummary s = run_file(dir.file("p.txt"), dir.file("out.jsonl"), greedy(8), engine);
  EXPECT_EQ(s.n_prompts, 5);
  EXPECT_EQ(s.generated_tokens, 5 * 8);
  EXPECT_FALSE(std::filesystem::exists(dir.file("out.jsonl.partial")));
  for (const auto& e : std::filesystem::directory_iterator(dir.file(""))) {
    EXPECT_NE(e.path().filename().string().rfind("out.jsonl.tmp", 0), 0u) << e.path();
  }

  const Tokenizer& tok = fixture_tokenizer();
  const auto recs = records(dir.file("out.jsonl"));
  ASSERT_EQ(recs.size(), 5u);
  const std::vector<int> ids = {0, 1, 3, 4, 5};
  const std::vector<std::string> texts = {
      "The quick brown fox", "Once upon a time, in a land far away, there lived a king", "Hello",
      "A list: one, two, three, four, five, six", "Why is the sky blue?"};
  for (size_t i = 0; i < recs.size(); ++i) {
    const auto& r = recs[i];
    std::vector<std::string> keys;
    for (const auto& [k, v] : r.items()) keys.push_back(k);
    EXPECT_EQ(keys,
              (std::vector<std::string>{"id", "completion", "prompt_tokens", "completion_tokens",
                                        "finish_reason", "completion_ids"}));
    EXPECT_EQ(r["id"], ids[i]);
    const std::vector<int32_t> prompt = tok.encode(texts[i], tok.add_bos_default());
    EXPECT_EQ(r["prompt_tokens"], prompt.size());
    // Greedy on the fake engine: (last + 1) mod n_vocab each step.
    std::vector<int32_t> want;
    int32_t last = prompt.back();
    for (int k = 0; k < 8; ++k) want.push_back(last = static_cast<int32_t>((last + 1) % vocab()));
    EXPECT_EQ(r["completion_ids"].get<std::vector<int32_t>>(), want);
    EXPECT_EQ(r["completion"], tok.decode(want, true));
    EXPECT_EQ(r["completion_tokens"], 8);
    EXPECT_EQ(r["finish_reason"], "length");
  }
}

TEST(Driver, NoIdsUnlessAsked) {
  ScratchDir dir;
  write_text(dir.file("p.txt"), "hello\n");
  FakeEngine engine(vocab());
  GenerateOptions o = greedy(3);
  o.ids = false;
  run_file(dir.file("p.txt"), dir.file("o.jsonl"), o, engine);
  EXPECT_FALSE(records(dir.file("o.jsonl"))[0].contains("completion_ids"));
}

TEST(Driver, BlocksGroupPromptsOfSimilarLength) {
  const Tokenizer& tok = fixture_tokenizer();
  const PromptFile pf = parse_prompt_file("p.txt", kPrompts);
  const std::vector<Job> jobs = prepare_jobs(pf, tok, 512, greedy(), "m");
  const auto blocks = plan_blocks(jobs, 2, [](size_t) { return false; });
  ASSERT_EQ(blocks.size(), 3u);
  size_t prev = SIZE_MAX, n = 0;
  for (const auto& b : blocks) {
    EXPECT_LE(b.size(), 2u);
    for (size_t i : b) {
      EXPECT_LE(jobs[i].tokens.size(), prev);
      prev = jobs[i].tokens.size();
      ++n;
    }
  }
  EXPECT_EQ(n, jobs.size());
  // Skipped jobs are left out.
  const auto some = plan_blocks(jobs, 4, [](size_t i) { return i % 2 == 0; });
  ASSERT_EQ(some.size(), 1u);
  EXPECT_EQ(some[0].size(), 2u);
}

TEST(Driver, EosEndsASequenceWithStop) {
  ScratchDir dir;
  write_text(dir.file("p.txt"), "Hello\nThe quick brown fox\n");
  FakeEngine engine(vocab(), 4);
  const int32_t eos = fixture_tokenizer().eos_ids().front();
  engine.favourite = [&](const std::vector<int32_t>& t) {
    return t.size() >= 12 ? eos : static_cast<int32_t>((t.back() + 1) % vocab());
  };
  run_file(dir.file("p.txt"), dir.file("o.jsonl"), greedy(50), engine);
  const auto recs = records(dir.file("o.jsonl"));
  for (const auto& r : recs) {
    EXPECT_EQ(r["finish_reason"], "stop");
    const int64_t n_prompt = r["prompt_tokens"].get<int64_t>();
    const auto ids = r["completion_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(static_cast<int64_t>(ids.size()), 12 - n_prompt + 1);
    EXPECT_EQ(ids.back(), eos);
    EXPECT_EQ(r["completion"], fixture_tokenizer().decode(ids, true));
  }
}

TEST(Driver, StopStringsCutTheCompletionAndPerPromptStopReplacesTheDefault) {
  ScratchDir dir;
  const Tokenizer& tok = fixture_tokenizer();
  // The greedy continuation of "Hello" and a stop string in its middle.
  const std::vector<int32_t> prompt = tok.encode("Hello", tok.add_bos_default());
  std::vector<int32_t> chain;
  for (int32_t last = prompt.back(); chain.size() < 12;) {
    chain.push_back(last = static_cast<int32_t>((last + 1) % vocab()));
  }
  const std::string full = tok.decode(chain, true);
  ASSERT_GE(full.size(), 8u);
  const std::string stop = full.substr(full.size() / 2, 3);
  const std::string cut = full.substr(0, full.find(stop));
  write_text(dir.file("p.jsonl"),
             "{\"prompt\": \"Hello\"}\n{\"prompt\": \"Hello\", \"stop\": [\"\\u0001never\"]}\n");
  FakeEngine engine(vocab(), 4);
  GenerateOptions o = greedy(12);
  o.stop = {stop};
  run_file(dir.file("p.jsonl"), dir.file("o.jsonl"), o, engine);
  const auto recs = records(dir.file("o.jsonl"));
  EXPECT_EQ(recs[0]["finish_reason"], "stop");
  EXPECT_EQ(recs[0]["completion"], cut);
  EXPECT_LT(recs[0]["completion_tokens"].get<int>(), 12);
  EXPECT_EQ(recs[1]["finish_reason"], "length");
  EXPECT_EQ(recs[1]["completion"], full);
}

TEST(Driver, OutputDoesNotDependOnBlockSizeOrOtherPrompts) {
  ScratchDir dir;
  write_text(dir.file("p.txt"), kPrompts);
  GenerateOptions o = greedy(24);
  o.sampling.temperature = 1.0f;
  o.sampling.top_p = 0.95f;
  o.seed = 11;
  std::vector<std::string> outputs;
  for (int64_t bs : {1, 3, 16}) {
    FakeEngine engine(vocab(), bs);
    const std::string out = dir.file("o" + std::to_string(bs) + ".jsonl");
    run_file(dir.file("p.txt"), out, o, engine);
    outputs.push_back(read_text(out));
  }
  EXPECT_EQ(outputs[0], outputs[1]);
  EXPECT_EQ(outputs[0], outputs[2]);
  // Sampling really happened: not the greedy chain everywhere.
  FakeEngine g(vocab(), 4);
  run_file(dir.file("p.txt"), dir.file("greedy.jsonl"), greedy(24), g);
  EXPECT_NE(read_text(dir.file("greedy.jsonl")), outputs[0]);

  // The first lines alone, in a block of their own: the same records.
  write_text(dir.file("head.txt"),
             "The quick brown fox\nOnce upon a time, in a land far away, there lived a king\n");
  FakeEngine e1(vocab(), 8);
  run_file(dir.file("head.txt"), dir.file("head.jsonl"), o, e1);
  const auto all = read_lines(dir.file("o1.jsonl"));
  const auto head = read_lines(dir.file("head.jsonl"));
  ASSERT_EQ(head.size(), 2u);
  EXPECT_EQ(head[0], all[0]);
  EXPECT_EQ(head[1], all[1]);

  // Another seed: other completions.
  o.seed = 12;
  FakeEngine e2(vocab(), 3);
  run_file(dir.file("p.txt"), dir.file("seed12.jsonl"), o, e2);
  EXPECT_NE(read_text(dir.file("seed12.jsonl")), outputs[0]);
}

// Speculation by prompt lookup changes how many passes a run takes, never
// its records: greedy and sampled alike (each kept token is the sampler's
// choice from its own row, in order), whatever the draft length, with
// sequences ending on their limit or a stop string amid accepted drafts.
TEST(Driver, SpeculationKeepsTheRecordsOfDecodingWithout) {
  ScratchDir dir;
  write_text(dir.file("p.txt"), kPrompts);
  // The favourite repeats the token five back: the output copies its own
  // recent past (and, first, the prompt's end), which prompt lookup predicts.
  auto make = [&](int64_t max_draft) {
    auto e = std::make_unique<FakeEngine>(vocab(), 3);
    e->favourite = [](const std::vector<int32_t>& t) {
      return t.size() >= 5 ? t[t.size() - 5] : t.back();
    };
    e->bonus = 9.0f;  // sampled: the favourite about 88% of the time
    e->max_draft = max_draft;
    return e;
  };
  GenerateOptions sampled = greedy(40);
  sampled.sampling.temperature = 1.0f;
  sampled.seed = 5;
  GenerateOptions stopped = greedy(40);
  stopped.stop = {"fox brown fox brown fox b", "ooHellooHe"};
  for (const auto& [name, base] : {std::pair<std::string, GenerateOptions>{"greedy", greedy(40)},
                                   {"sampled", sampled},
                                   {"stop", stopped}}) {
    auto ref_engine = make(0);
    run_file(dir.file("p.txt"), dir.file(name + ".jsonl"), base, *ref_engine);
    const std::string ref = read_text(dir.file(name + ".jsonl"));
    if (name == "stop") {
      ASSERT_NE(ref.find("\"finish_reason\":\"stop\""), std::string::npos) << ref;
    }
    for (const int32_t k : {1, 3, 8}) {
      GenerateOptions o = base;
      o.speculate_tokens = k;
      auto e = make(k);
      const std::string out = dir.file(name + std::to_string(k) + ".jsonl");
      const RunSummary s = run_file(dir.file("p.txt"), out, o, *e);
      EXPECT_EQ(read_text(out), ref) << name << " with " << k << " draft tokens";
      EXPECT_EQ(s.generated_tokens, e->stats().generated_tokens) << name << " " << k;
      EXPECT_GT(e->stats().accepted_tokens, 0) << name << " " << k;
      EXPECT_LT(e->n_steps, ref_engine->n_steps) << name << " " << k << ": no pass was saved";
      if (name == "sampled") {
        EXPECT_LT(e->stats().accepted_tokens, e->stats().drafted_tokens)
            << "no draft token was rejected: the rejection path went untested";
      }
    }
  }
}

// A drafter that proposes by prompt lookup and checks how the driver uses
// it: a block begins before it is asked, every sequence that goes on asks
// once per step, in one call, and each sequence of a block finishes once.
// It proposes one token too many (the driver keeps k).
class CheckingDrafter final : public Drafter {
 public:
  void begin_block(std::span<const SeqInput> seqs, int64_t max_draft) override {
    EXPECT_EQ(finished_.size(), live_.size()) << "a block began before the last one finished";
    live_.assign(seqs.size(), true);
    finished_.clear();
    max_draft_ = max_draft;
    ++blocks;
  }
  void propose(std::span<const Request> requests, std::span<std::vector<int32_t>> out) override {
    ++calls;
    std::vector<bool> asked(live_.size(), false);
    for (size_t i = 0; i < requests.size(); ++i) {
      const auto s = static_cast<size_t>(requests[i].seq);
      EXPECT_TRUE(live_.at(s)) << "a finished sequence asked";
      EXPECT_FALSE(asked[s]) << "a sequence asked twice in one call";
      asked[s] = true;
      EXPECT_GE(requests[i].k, 1);
      EXPECT_LE(requests[i].k, max_draft_);
      out[i] = ngram_draft(requests[i].context, requests[i].k + 1);
      ++requests_seen;
    }
    // Every live sequence asks (none finished in this step is left out).
    for (size_t s = 0; s < live_.size(); ++s) {
      if (live_[s]) {
        EXPECT_TRUE(asked[s]) << "live sequence " << s << " did not ask";
      }
    }
  }
  void finished(int32_t seq) override {
    EXPECT_TRUE(live_.at(static_cast<size_t>(seq))) << "sequence " << seq << " finished twice";
    live_.at(static_cast<size_t>(seq)) = false;
    finished_.push_back(seq);
  }
  int64_t blocks = 0, calls = 0, requests_seen = 0;

 private:
  std::vector<bool> live_;
  std::vector<int32_t> finished_;
  int64_t max_draft_ = 0;
};

TEST(Driver, ADrafterIsAskedOnceAStepForEverySequenceThatGoesOn) {
  ScratchDir dir;
  write_text(dir.file("p.txt"), kPrompts);
  auto make = [&](int64_t max_draft) {
    auto e = std::make_unique<FakeEngine>(vocab(), 2);
    e->favourite = [](const std::vector<int32_t>& t) {
      return t.size() >= 5 ? t[t.size() - 5] : t.back();
    };
    e->max_draft = max_draft;
    return e;
  };
  GenerateOptions o = greedy(30);
  o.stop = {"fox brown fox brown fox b"};
  auto ref_engine = make(0);
  run_file(dir.file("p.txt"), dir.file("ref.jsonl"), o, *ref_engine);
  o.speculate_tokens = 3;
  auto e = make(3);
  CheckingDrafter drafter;
  run_file(dir.file("p.txt"), dir.file("out.jsonl"), o, *e, &drafter);
  EXPECT_EQ(read_text(dir.file("out.jsonl")), read_text(dir.file("ref.jsonl")));
  EXPECT_EQ(drafter.blocks, 3);  // 6 prompts, blocks of 2
  EXPECT_LE(drafter.calls, e->n_steps);
  EXPECT_GT(drafter.requests_seen, drafter.calls) << "sequences of a step asked one at a time";
  EXPECT_GT(e->stats().accepted_tokens, 0);
  EXPECT_LT(e->n_steps, ref_engine->n_steps);
}

TEST(Driver, PerPromptTemperatureAndMaxNewTokens) {
  ScratchDir dir;
  write_text(dir.file("p.jsonl"),
             "{\"prompt\": \"Hello\", \"temperature\": 0, \"max_new_tokens\": 5, \"id\": \"a\"}\n");
  GenerateOptions o = greedy(20);
  o.sampling.temperature = 5.0f;
  FakeEngine engine(vocab(), 2);
  run_file(dir.file("p.jsonl"), dir.file("o.jsonl"), o, engine);
  const auto r = records(dir.file("o.jsonl"))[0];
  EXPECT_EQ(r["id"], "a");
  const auto ids = r["completion_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 5u);
  for (size_t k = 1; k < ids.size(); ++k) EXPECT_EQ(ids[k], (ids[k - 1] + 1) % vocab());
}

TEST(Driver, InterruptedRunResumesFromPartial) {
  ScratchDir dir;
  write_text(dir.file("p.txt"), kPrompts);
  GenerateOptions o = greedy(6);
  o.sampling.temperature = 0.8f;
  o.seed = 3;
  // Reference: one uninterrupted run.
  FakeEngine ref(vocab(), 2);
  run_file(dir.file("p.txt"), dir.file("ref.jsonl"), o, ref);

  // Interrupted after the first block of 2.
  FakeEngine first(vocab(), 2);
  first.throw_after_blocks = 1;
  EXPECT_THROW(run_file(dir.file("p.txt"), dir.file("out.jsonl"), o, first), Error);
  EXPECT_FALSE(std::filesystem::exists(dir.file("out.jsonl")));
  const auto partial = read_lines(dir.file("out.jsonl.partial"));
  ASSERT_EQ(partial.size(), 3u);  // header + 2 records
  EXPECT_NE(partial[0].find("strata_partial"), std::string::npos);
  // A record cut short by the interruption is dropped on resume.
  {
    std::ofstream f(dir.file("out.jsonl.partial"), std::ios::app);
    f << "{\"index\":4,\"record\":{\"id\":5,\"compl";
  }

  FakeEngine second(vocab(), 3);
  run_file(dir.file("p.txt"), dir.file("out.jsonl"), o, second);
  EXPECT_EQ(second.n_seqs_run, 3);  // only the prompts not done
  EXPECT_FALSE(std::filesystem::exists(dir.file("out.jsonl.partial")));
  EXPECT_EQ(read_text(dir.file("out.jsonl")), read_text(dir.file("ref.jsonl")));
}

TEST(Driver, ResumeRefusesAForeignPartial) {
  ScratchDir dir;
  write_text(dir.file("p.txt"), kPrompts);
  GenerateOptions o = greedy(4);
  FakeEngine first(vocab(), 2);
  first.throw_after_blocks = 1;
  EXPECT_THROW(run_file(dir.file("p.txt"), dir.file("out.jsonl"), o, first), Error);
  ASSERT_TRUE(std::filesystem::exists(dir.file("out.jsonl.partial")));

  // Another prompt file content.
  write_text(dir.file("p.txt"), std::string(kPrompts) + "one more\n");
  FakeEngine e(vocab(), 2);
  std::string msg = error_of([&] { run_file(dir.file("p.txt"), dir.file("out.jsonl"), o, e); });
  EXPECT_NE(msg.find("another prompt file"), std::string::npos) << msg;
  EXPECT_NE(msg.find("out.jsonl.partial"), std::string::npos) << msg;
  EXPECT_EQ(e.n_seqs_run, 0);

  // The same prompts, other settings.
  write_text(dir.file("p.txt"), kPrompts);
  GenerateOptions o2 = o;
  o2.max_new_tokens = 5;
  msg = error_of([&] { run_file(dir.file("p.txt"), dir.file("out.jsonl"), o2, e); });
  EXPECT_NE(msg.find("other settings"), std::string::npos) << msg;

  // Not a strata file at all.
  write_text(dir.file("x.jsonl.partial"), "hello\nworld\n");
  msg = error_of([&] { run_file(dir.file("p.txt"), dir.file("x.jsonl"), o, e); });
  EXPECT_NE(msg.find("not a strata partial output"), std::string::npos) << msg;
  EXPECT_EQ(e.n_seqs_run, 0);
}

TEST(Driver, UnwritableOutputFailsBeforeAnyCompute) {
  ScratchDir dir;
  write_text(dir.file("p.txt"), kPrompts);
  FakeEngine e(vocab(), 2);
  std::string msg =
      error_of([&] { run_file(dir.file("p.txt"), dir.file("no/such/dir/o.jsonl"), greedy(), e); });
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  msg = error_of([&] { run_file(dir.file("p.txt"), dir.path(), greedy(), e); });
  EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
  if (::geteuid() != 0) {  // root writes anywhere
    std::filesystem::create_directory(dir.file("ro"));
    ::chmod(dir.file("ro").c_str(), 0555);
    msg = error_of([&] { run_file(dir.file("p.txt"), dir.file("ro/o.jsonl"), greedy(), e); });
    EXPECT_NE(msg.find("not writable"), std::string::npos) << msg;
    ::chmod(dir.file("ro").c_str(), 0755);
  }
  EXPECT_EQ(e.n_seqs_run, 0);
}

TEST(Driver, PromptsLongerThanTheContext) {
  ScratchDir dir;
  const Tokenizer& tok = fixture_tokenizer();
  const std::string long_text = "one two three four five six seven eight nine ten eleven twelve";
  const size_t n_long = tok.encode(long_text, tok.add_bos_default()).size();
  const size_t n_short = tok.encode("Hello", tok.add_bos_default()).size();
  const int64_t n_ctx = static_cast<int64_t>(n_long) - 1;
  ASSERT_GT(n_ctx, static_cast<int64_t>(n_short) + 1);
  write_text(dir.file("p.jsonl"), "{\"prompt\": \"Hello\"}\n{\"prompt\": \"" + long_text +
                                      "\", \"id\": \"long-one\"}\n");
  FakeEngine e(vocab(), 2, n_ctx);
  const std::string msg =
      error_of([&] { run_file(dir.file("p.jsonl"), dir.file("o.jsonl"), greedy(100), e); });
  EXPECT_NE(msg.find("\"long-one\""), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(n_long) + " tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(n_ctx)), std::string::npos) << msg;
  EXPECT_NE(msg.find("--skip-long"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.jsonl.partial")));

  GenerateOptions o = greedy(100);
  o.skip_long = true;
  run_file(dir.file("p.jsonl"), dir.file("o.jsonl"), o, e);
  const auto recs = records(dir.file("o.jsonl"));
  ASSERT_EQ(recs.size(), 2u);
  // The short prompt is cut to the context: n_ctx - prompt tokens.
  EXPECT_EQ(recs[0]["finish_reason"], "length");
  EXPECT_EQ(recs[0]["completion_tokens"], n_ctx - static_cast<int64_t>(n_short));
  EXPECT_EQ(recs[1]["id"], "long-one");
  EXPECT_EQ(recs[1]["finish_reason"], "skipped");
  EXPECT_EQ(recs[1]["completion_tokens"], 0);
  EXPECT_TRUE(recs[1].contains("error"));
  EXPECT_EQ(e.n_seqs_run, 1);
}

TEST(Driver, EmptyPromptAfterTokenizationNamesTheId) {
  // The Qwen2 fixture adds no BOS, so an empty prompt has no tokens.
  const auto tok = Tokenizer::from_path(test::test_data("models/qwen2"));
  ASSERT_FALSE(tok->add_bos_default());
  const PromptFile pf =
      parse_prompt_file("p.jsonl", "{\"prompt\": \"x\"}\n{\"prompt\": \"\", \"id\": \"e\"}\n");
  const std::string msg = error_of([&] { prepare_jobs(pf, *tok, 512, greedy(), "m"); });
  EXPECT_NE(msg.find("p.jsonl:2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"e\""), std::string::npos) << msg;
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
}

TEST(Driver, ChatPromptsUseTheTemplate) {
  const Tokenizer& tok = fixture_tokenizer();
  const PromptFile pf = parse_prompt_file(
      "p.jsonl", "{\"prompt\": \"Hi\"}\n{\"prompt\": \"Hi\", \"system\": \"Be brief.\"}\n");
  GenerateOptions o = greedy();
  o.chat = true;
  o.system = "Default system.";
  const std::vector<Job> jobs = prepare_jobs(pf, tok, 512, o, "m");
  const ChatTemplate ct = ChatTemplate::for_model(tok, "m");
  EXPECT_EQ(jobs[0].tokens, tok.encode(ct.render(std::string("Default system."), "Hi"), false));
  EXPECT_EQ(jobs[1].tokens, tok.encode(ct.render(std::string("Be brief."), "Hi"), false));
  // Special tokens of the template became their ids.
  EXPECT_EQ(jobs[0].tokens.front(), *tok.find_token("<|im_start|>"));
}

TEST(Driver, BadOptionsAreErrors) {
  const PromptFile pf = parse_prompt_file("p.txt", "x\n");
  GenerateOptions o = greedy();
  o.max_new_tokens = 0;
  EXPECT_NE(error_of([&] {
              prepare_jobs(pf, fixture_tokenizer(), 512, o, "m");
            }).find("--max-new-tokens"),
            std::string::npos);
  o = greedy();
  o.stop = {""};
  EXPECT_NE(error_of([&] { prepare_jobs(pf, fixture_tokenizer(), 512, o, "m"); }).find("--stop"),
            std::string::npos);
  o = greedy();
  o.sampling.top_p = 0;
  EXPECT_NE(error_of([&] { prepare_jobs(pf, fixture_tokenizer(), 512, o, "m"); }).find("--top-p"),
            std::string::npos);
}

TEST(Driver, SyntheticJobsAvoidSpecialTokensAndRepeat) {
  const Tokenizer& tok = fixture_tokenizer();
  const auto a = synthetic_jobs(tok, vocab(), 5, 33, 7);
  const auto b = synthetic_jobs(tok, vocab(), 5, 33, 7);
  ASSERT_EQ(a.size(), 5u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens);
    EXPECT_EQ(a[i].tokens.size(), 33u);
    EXPECT_EQ(a[i].max_new_tokens, 7);
    for (int32_t t : a[i].tokens) {
      EXPECT_FALSE(tok.is_special(t));
      EXPECT_GE(t, 0);
      EXPECT_LT(t, vocab());
    }
  }
  EXPECT_NE(a[0].tokens, a[1].tokens);
  // Bench: exactly gen_len tokens each, EOS ignored, no output file.
  FakeEngine e(vocab(), 5);
  const int32_t eos = tok.eos_ids().front();
  e.favourite = [eos](const std::vector<int32_t>&) { return eos; };
  GenerateOptions o;
  o.ignore_eos = true;
  const RunSummary s = run_jobs(e, tok, a, o, nullptr);
  EXPECT_EQ(s.generated_tokens, 35);
  EXPECT_EQ(s.n_sequences, 5);
}

}  // namespace
}  // namespace strata
