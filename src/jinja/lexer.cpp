// Jinja template tokens (lexer.h).
#include "jinja/lexer.h"

#include <cctype>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace strata::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string rstrip(std::string_view s) {
  size_t e = s.size();
  while (e > 0 && is_space(s[e - 1])) --e;
  return std::string(s.substr(0, e));
}

void append_utf8(std::string& out, uint32_t c) {
  tok::utf8_append(out, static_cast<char32_t>(c));
}

// Python's unicode-escape decoding of a string literal's body.
std::string unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    auto hex = [&](size_t n) -> bool {
      uint32_t v = 0;
      for (size_t k = 1; k <= n; ++k) {
        if (i + k >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + k]))) return false;
        v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(s[i + k]))
                                               ? s[i + k] - '0'
                                               : (std::tolower(s[i + k]) - 'a' + 10));
      }
      append_utf8(out, v);
      i += n;
      return true;
    };
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
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'v':
        out += '\v';
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case '\n':
        break;  // a line continuation
      case 'x':
        if (!hex(2)) out += "\\x";
        break;
      case 'u':
        if (!hex(4)) out += "\\u";
        break;
      case 'U':
        if (!hex(8)) out += "\\U";
        break;
      default:
        if (c >= '0' && c <= '7') {
          uint32_t v = static_cast<uint32_t>(c - '0');
          for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k) {
            v = v * 8 + static_cast<uint32_t>(s[++i] - '0');
          }
          append_utf8(out, v);
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

}  // namespace

std::vector<Token> lex(std::string_view raw, const std::string& name) {
  // Newlines as "\n", and no final newline.
  std::string src;
  src.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '\r') {
      src += '\n';
      if (i + 1 < raw.size() && raw[i + 1] == '\n') ++i;
    } else {
      src += raw[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();

  std::vector<Token> out;
  int line = 1;
  size_t pos = 0;
  bool line_starting = true;
  auto count_lines = [&](size_t from, size_t to) {
    for (size_t k = from; k < to; ++k) line += src[k] == '\n';
  };
  while (pos < src.size()) {
    size_t q = pos;
    while (q < src.size() && !(src[q] == '{' && q + 1 < src.size() &&
                               (src[q + 1] == '{' || src[q + 1] == '%' || src[q + 1] == '#'))) {
      ++q;
    }
    std::string text = src.substr(pos, q - pos);
    const int text_line = line;
    count_lines(pos, q);
    if (q == src.size()) {
      if (!text.empty()) out.push_back({Token::Type::kText, text, text_line});
      break;
    }
    const char kind = src[q + 1];
    const char ctrl = q + 2 < src.size() ? src[q + 2] : '\0';
    if (ctrl == '-') {
      text = rstrip(text);
    } else if (kind != '{' && ctrl != '+') {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting) && l_pos < text.size()) {
        bool blank = true;
        for (size_t k = l_pos; k < text.size(); ++k) blank = blank && is_space(text[k]);
        if (blank) text.resize(l_pos);
      }
    }
    if (!text.empty()) out.push_back({Token::Type::kText, text, text_line});
    size_t p = q + 2 + ((ctrl == '-' || ctrl == '+') ? 1 : 0);
    const int tag_line = line;

    bool strip_after = false, keep_newline = false;
    if (kind == '#') {
      const size_t end = src.find("#}", p);
      if (end == std::string::npos)
        fail("{}: template line {}: a comment is not closed with #}}", name, tag_line);
      strip_after = end > p && src[end - 1] == '-';
      keep_newline = end > p && src[end - 1] == '+';
      count_lines(p, end);
      p = end + 2;
    } else {
      const bool block = kind == '%';
      out.push_back({block ? Token::Type::kBlockBegin : Token::Type::kVarBegin, "", tag_line});
      int depth = 0;
      for (;;) {
        while (p < src.size() && is_space(src[p])) {
          line += src[p] == '\n';
          ++p;
        }
        if (p >= src.size()) {
          fail("{}: template line {}: a {} tag is not closed", name, tag_line, block ? "{%" : "{{");
        }
        const std::string_view rest(src.data() + p, src.size() - p);
        const std::string_view close = block ? "%}" : "}}";
        if (depth == 0) {
          if (rest.substr(0, 1) == "-" && rest.substr(1, 2) == close) {
            strip_after = true;
            p += 3;
            break;
          }
          if (block && rest.substr(0, 1) == "+" && rest.substr(1, 2) == close) {
            keep_newline = true;
            p += 3;
            break;
          }
          if (rest.substr(0, 2) == close) {
            p += 2;
            break;
          }
        }
        const char c = src[p];
        if (c == '\'' || c == '"') {
          size_t j = p + 1;
          while (j < src.size() && src[j] != c) j += src[j] == '\\' ? 2 : 1;
          if (j >= src.size()) fail("{}: template line {}: a string is not closed", name, line);
          out.push_back({Token::Type::kString,
                         unescape(std::string_view(src).substr(p + 1, j - p - 1)), line});
          count_lines(p, j);
          p = j + 1;
        } else if (std::isdigit(static_cast<unsigned char>(c))) {
          size_t j = p;
          while (j < src.size() &&
                 (std::isdigit(static_cast<unsigned char>(src[j])) || src[j] == '_'))
            ++j;
          bool is_float = false;
          if (j + 1 < src.size() && src[j] == '.' &&
              std::isdigit(static_cast<unsigned char>(src[j + 1]))) {
            is_float = true;
            ++j;
            while (j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
          }
          if (j < src.size() && (src[j] == 'e' || src[j] == 'E')) {
            size_t k = j + 1;
            if (k < src.size() && (src[k] == '+' || src[k] == '-')) ++k;
            if (k < src.size() && std::isdigit(static_cast<unsigned char>(src[k]))) {
              is_float = true;
              j = k;
              while (j < src.size() && std::isdigit(static_cast<unsigned char>(src[j]))) ++j;
            }
          }
          std::string num;
          for (size_t k = p; k < j; ++k) {
            if (src[k] != '_') num += src[k];
          }
          out.push_back({is_float ? Token::Type::kFloat : Token::Type::kInt, num, line});
          p = j;
        } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
          size_t j = p;
          while (j < src.size() &&
                 (std::isalnum(static_cast<unsigned char>(src[j])) || src[j] == '_'))
            ++j;
          out.push_back({Token::Type::kName, src.substr(p, j - p), line});
          p = j;
        } else {
          static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
          std::string_view op = rest.substr(0, 1);
          for (const char* t : two) {
            if (rest.substr(0, 2) == t) op = rest.substr(0, 2);
          }
          if (op.size() == 1 &&
              std::string_view("+-*/%~<>()[]{},.:|=").find(c) == std::string_view::npos) {
            fail("{}: template line {}: unexpected character '{}' in a tag", name, line, c);
          }
          if (c == '(' || c == '[' || c == '{') ++depth;
          if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
          out.push_back({Token::Type::kOp, std::string(op), line});
          p += op.size();
        }
      }
      out.push_back({block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "", line});
      if (!block) keep_newline = true;
    }
    if (strip_after) {
      while (p < src.size() && is_space(src[p])) {
        line += src[p] == '\n';
        ++p;
      }
    } else if (!keep_newline && p < src.size() && src[p] == '\n') {
      ++line;
      ++p;
    }
    line_starting = p > 0 && src[p - 1] == '\n';
    pos = p;
  }
  out.push_back({Token::Type::kEof, "", line});
  return out;
}

}  // namespace strata::jinja
