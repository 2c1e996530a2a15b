// PCRE2 wrapper: RAII for the compiled code, match data, match context and
// JIT stack; the match loop with PCRE2's empty-match convention.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include <mutex>

#include "core/error.h"
#include "core/log.h"

namespace strata::tok {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  const int n = pcre2_get_error_message(code, buf, sizeof(buf));
  if (n < 0) return "error " + std::to_string(code);
  return std::string(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

// Per-thread match context with a JIT stack large enough for long runs of
// whitespace under patterns like \s+(?!\S) (the default is 32 KiB).
struct ThreadMatchContext {
  pcre2_match_context* ctx = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadMatchContext() {
    ctx = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 16 * 1024 * 1024, nullptr);
    if (ctx && stack) pcre2_jit_stack_assign(ctx, nullptr, stack);
  }
  ~ThreadMatchContext() {
    if (stack) pcre2_jit_stack_free(stack);
    if (ctx) pcre2_match_context_free(ctx);
  }
  ThreadMatchContext(const ThreadMatchContext&) = delete;
  ThreadMatchContext& operator=(const ThreadMatchContext&) = delete;
};

pcre2_match_context* thread_match_context() {
  thread_local ThreadMatchContext tmc;
  return tmc.ctx;
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() {
    if (code) pcre2_code_free(code);
  }
};

Regex::Regex(std::string pattern, bool literal, std::string_view context)
    : pattern_(std::move(pattern)), code_(std::make_unique<Code>()) {
  // PCRE2_LITERAL does not combine with PCRE2_UCP (which has nothing to do there).
  uint32_t options = PCRE2_UTF | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  int err = 0;
  PCRE2_SIZE err_offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                              options, &err, &err_offset, nullptr);
  if (!code_->code) {
    fail("{}: cannot compile regex '{}': {} at offset {}", context, pattern_, pcre2_message(err),
         err_offset);
  }
  const int jit_rc = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE);
  jit_ = jit_rc == 0;
  if (!jit_) {
    static std::once_flag once;
    std::call_once(once, [&] {
      spdlog::info("tokenizer: PCRE2 JIT unavailable ({}); matching with the interpreter",
                   pcre2_message(jit_rc));
    });
  }
}

Regex::~Regex() = default;

void Regex::find_all(std::string_view text, std::vector<Span>& out) const {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(
      pcre2_match_data_create_from_pattern(code_->code, nullptr));
  STRATA_ASSERT(md != nullptr);
  pcre2_match_context* mctx = thread_match_context();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t start = 0;
  while (start <= n) {
    const int rc =
        jit_ ? pcre2_jit_match(code_->code, subject, n, start, PCRE2_NO_UTF_CHECK, md.get(), mctx)
             : pcre2_match(code_->code, subject, n, start, PCRE2_NO_UTF_CHECK, md.get(), mctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      fail("tokenizer: regex '{}' failed on a text of {} bytes at offset {}: {}", pattern_, n,
           start, pcre2_message(rc));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    const size_t mb = ov[0];
    const size_t me = ov[1];
    out.push_back({mb, me});
    if (me > mb) {
      start = me;
    } else {
      // Empty match: resume after the next code point.
      if (mb >= n) break;
      size_t step = 1;
      while (mb + step < n && (static_cast<unsigned char>(text[mb + step]) & 0xC0) == 0x80) ++step;
      start = mb + step;
    }
  }
}

}  // namespace strata::tok
