// Chat template recognition and rendering (chat_template.h). The template is
// cut into its literal pieces (text outside tags, quoted strings inside
// them, with Jinja's escapes undone); the default system message and the
// Llama 3.1 preamble are read from those pieces.
#include "generate/chat_template.h"

#include <vector>

#include "core/error.h"

namespace strata {
namespace {

struct Literal {
  size_t pos;  // offset in the template where it starts
  std::string text;
};

// Undoes the escapes of a Jinja string literal body.
std::string unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    switch (c) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      default:
        out += c;
        break;  // \\ \' \" and anything else: the character itself
    }
  }
  return out;
}

std::vector<Literal> literals(std::string_view t) {
  std::vector<Literal> out;
  size_t i = 0;
  while (i < t.size()) {
    const bool tag = t.compare(i, 2, "{{") == 0 || t.compare(i, 2, "{%") == 0;
    const bool comment = t.compare(i, 2, "{#") == 0;
    if (comment) {
      const size_t end = t.find("#}", i + 2);
      i = end == std::string_view::npos ? t.size() : end + 2;
    } else if (tag) {
      const std::string_view close = t[i + 1] == '{' ? "}}" : "%}";
      i += 2;
      while (i < t.size() && t.compare(i, 2, close) != 0) {
        if (t[i] == '\'' || t[i] == '"') {
          const char q = t[i];
          size_t j = i + 1;
          while (j < t.size() && t[j] != q) j += (t[j] == '\\') ? 2 : 1;
          if (j > t.size()) j = t.size();
          out.push_back({i + 1, unescape(t.substr(i + 1, j - i - 1))});
          i = j + 1;
        } else {
          ++i;
        }
      }
      i += 2;
    } else {
      size_t end = i;
      while (end < t.size() && !(t[end] == '{' && end + 1 < t.size() &&
                                 (t[end + 1] == '{' || t[end + 1] == '%' || t[end + 1] == '#'))) {
        ++end;
      }
      out.push_back({i, std::string(t.substr(i, end - i))});
      i = end;
    }
  }
  return out;
}

bool contains(std::string_view s, std::string_view what) {
  return s.find(what) != std::string_view::npos;
}

std::string trimmed(std::string_view s) {
  const char* ws = " \t\r\n\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(ws);
  return std::string(s.substr(b, e - b + 1));
}

[[noreturn]] void fail_unsupported(const std::string& model, std::string_view why) {
  fail(
      "{}: {}; --chat supports the ChatML style (<|im_start|>role ... <|im_end|>) and the "
      "Llama-3 style (<|start_header_id|>role<|end_header_id|> ... <|eot_id|>); run without "
      "--chat and write the prompts in the model's own format",
      model, why);
}

}  // namespace

std::string_view chat_style_name(ChatStyle s) {
  return s == ChatStyle::kChatMl ? "ChatML" : "Llama-3";
}

ChatTemplate ChatTemplate::parse(std::string_view t, std::string_view bos_text,
                                 const std::string& model_name) {
  if (trimmed(t).empty()) fail_unsupported(model_name, "the model has no chat template");
  ChatTemplate ct;
  const std::vector<Literal> lits = literals(t);
  if (contains(t, "<|im_start|>") && contains(t, "<|im_end|>")) {
    ct.style = ChatStyle::kChatMl;
    // A literal that writes a whole system turn is the default system message.
    const std::string_view head = "<|im_start|>system\n";
    for (const Literal& l : lits) {
      const size_t a = l.text.find(head);
      if (a == std::string::npos) continue;
      const size_t b = l.text.find("<|im_end|>", a + head.size());
      if (b == std::string::npos) continue;
      ct.default_system = l.text.substr(a + head.size(), b - a - head.size());
      break;
    }
  } else if (contains(t, "<|start_header_id|>") && contains(t, "<|end_header_id|>") &&
             contains(t, "<|eot_id|>")) {
    ct.style = ChatStyle::kLlama3;
    if (contains(t, "Cutting Knowledge Date")) {
      // Llama 3.1+: "Cutting Knowledge Date: <d>\n" then "Today Date: " + date_string + "\n\n".
      std::string knowledge, date;
      for (const Literal& l : lits) {
        if (knowledge.empty() && contains(l.text, "Cutting Knowledge Date")) knowledge = l.text;
      }
      // The fixed fallback: `set date_string = "26 Jul 2024"` (not strftime_now(...)).
      const std::string_view set_date = "date_string = ";
      for (size_t at = t.find(set_date); at != std::string_view::npos && date.empty();
           at = t.find(set_date, at + 1)) {
        const size_t q = at + set_date.size();
        if (q >= t.size() || (t[q] != '"' && t[q] != '\'')) continue;
        for (const Literal& l : lits) {
          if (l.pos == q + 1) date = l.text;
        }
      }
      bool has_today = false;
      for (const Literal& l : lits) has_today = has_today || l.text == "Today Date: ";
      if (knowledge.empty() || date.empty() || !has_today) {
        fail_unsupported(model_name,
                         "the Llama-3 chat template writes a date preamble in a form strata does "
                         "not recognise");
      }
      ct.system_preamble = knowledge + "Today Date: " + date + "\n\n";
      ct.always_system = true;
    }
  } else {
    fail_unsupported(model_name, "the chat template is of a style strata does not recognise");
  }
  ct.trim_content = contains(t, "trim");
  if (contains(t, "bos_token")) ct.bos_text = std::string(bos_text);
  return ct;
}

std::string ChatTemplate::render(const std::optional<std::string>& system,
                                 std::string_view user) const {
  std::vector<ChatMessage> messages;
  if (system) messages.push_back({"system", *system});
  messages.push_back({"user", std::string(user)});
  return render(messages);
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages) const {
  auto content = [&](std::string_view s) { return trim_content ? trimmed(s) : std::string(s); };
  const bool has_system = !messages.empty() && messages[0].role == "system";
  std::string out = bos_text;
  if (style == ChatStyle::kChatMl) {
    if (!has_system && default_system) {
      out += "<|im_start|>system\n" + content(*default_system) + "<|im_end|>\n";
    }
    for (const ChatMessage& m : messages) {
      out += "<|im_start|>" + m.role + "\n" + content(m.content) + "<|im_end|>\n";
    }
    out += "<|im_start|>assistant\n";
  } else {
    auto header = [](std::string_view role) {
      return "<|start_header_id|>" + std::string(role) + "<|end_header_id|>\n\n";
    };
    if (has_system || always_system) {
      out += header("system") + system_preamble +
             (has_system ? content(messages[0].content) : std::string()) + "<|eot_id|>";
    }
    for (size_t i = has_system ? 1 : 0; i < messages.size(); ++i) {
      out += header(messages[i].role) + content(messages[i].content) + "<|eot_id|>";
    }
    out += header("assistant");
  }
  return out;
}

}  // namespace strata
