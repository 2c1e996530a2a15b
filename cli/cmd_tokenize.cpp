// `strata tokenize`: prints the token ids of a text, space-separated on one
// line; --pieces adds one line per token with the bytes it stands for. The
// tokenizer is read straight from the model path (GGUF file, tokenizer.json,
// or a Hugging Face model directory), without loading any weights.
#include <cstdio>
#include <string>

#include "cli/command.h"
#include "core/log.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace strata::cli {
namespace {

// The piece as a double-quoted string: complete UTF-8 characters as they
// are, quotes, backslashes and control characters escaped, bytes that are
// not whole characters as \xNN.
std::string quoted_piece(const std::string& piece) {
  std::string out = "\"";
  for (size_t i = 0; i < piece.size();) {
    const tok::Utf8Step st = tok::utf8_step(piece, i);
    if (st.kind != tok::Utf8Step::kValid) {
      for (uint32_t k = 0; k < st.len; ++k) {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "\\x%02x", static_cast<unsigned char>(piece[i + k]));
        out += hex;
      }
    } else if (st.cp == '"' || st.cp == '\\') {
      out += '\\';
      out += static_cast<char>(st.cp);
    } else if (st.cp == '\n') {
      out += "\\n";
    } else if (st.cp == '\t') {
      out += "\\t";
    } else if (st.cp == '\r') {
      out += "\\r";
    } else if (st.cp < 0x20 || st.cp == 0x7F) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", static_cast<unsigned>(st.cp));
      out += hex;
    } else {
      out.append(piece, i, st.len);
    }
    i += st.len;
  }
  return out + "\"";
}

struct Options {
  std::string model;
  std::string text;
  bool pieces = false;
  bool no_bos = false;
};

const Command kTokenize{
    "tokenize", "Print the token ids of a text (the model's tokenizer only; no weights)", 70,
    [](CLI::App& sub) -> Runner {
      auto opt = std::make_shared<Options>();
      sub.add_option("--model", opt->model, "GGUF file, tokenizer.json, or model directory")
          ->required();
      sub.add_option("--text", opt->text, "The text to tokenize")->required();
      sub.add_flag("--pieces", opt->pieces, "Also print each token and the bytes it stands for");
      sub.add_flag("--no-bos", opt->no_bos, "Do not add the BOS token even where the model does");
      return [opt]() {
        const auto tokenizer = Tokenizer::from_path(opt->model);
        spdlog::debug("tokenize: {} ({} tokens) from {}", tokenizer->kind(), tokenizer->n_vocab(),
                      tokenizer->source());
        const bool add_bos = !opt->no_bos && tokenizer->add_bos_default();
        const std::vector<int32_t> ids = tokenizer->encode(opt->text, add_bos);
        std::string line;
        for (size_t i = 0; i < ids.size(); ++i) {
          if (i) line += ' ';
          line += std::to_string(ids[i]);
        }
        std::printf("%s\n", line.c_str());
        if (opt->pieces) {
          for (int32_t id : ids) {
            std::printf("%d\t%s\n", id, quoted_piece(tokenizer->piece(id)).c_str());
          }
        }
        return 0;
      };
    }};

}  // namespace
}  // namespace strata::cli
