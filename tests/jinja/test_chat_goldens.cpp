// The real chat templates of tests/data/chat-templates/ rendered for the
// conversations of scripts/make_chat_goldens.py (system or not, several
// turns, assistant turns, tools and tool calls, unicode, white space): the
// text equals jinja2's byte for byte, and where jinja2's rendering raised
// (raise_exception), ours raises an Error with the same message.
#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "jinja/template.h"
#include "support/files.h"

namespace strata::jinja {
namespace {

using test::read_text;
using test::test_data;

// strftime_now pinned to the goldens' date (2026-01-15 09:30:00, local time).
Value pinned_strftime() {
  std::tm tm{};
  tm.tm_year = 2026 - 1900;
  tm.tm_mon = 0;
  tm.tm_mday = 15;
  tm.tm_hour = 9;
  tm.tm_min = 30;
  tm.tm_isdst = -1;
  return strftime_now_function(std::mktime(&tm));
}

TEST(ChatGoldens, EveryTemplateRendersAsJinja2) {
  const auto goldens =
      nlohmann::ordered_json::parse(read_text(test_data("chat-templates/goldens.json")));
  std::map<std::string, std::unique_ptr<Template>> templates;
  std::map<std::string, int> passed;
  size_t n = 0;
  for (const auto& c : goldens["cases"]) {
    const std::string name = c["template"];
    auto& t = templates[name];
    if (!t) {
      try {
        t = std::make_unique<Template>(read_text(test_data("chat-templates/" + name)), name);
      } catch (const Error& e) {
        ADD_FAILURE() << name << ": " << e.what();
        continue;
      }
    }
    Dict vars = std::move(*from_json(c["variables"]).dict);
    vars.set("strftime_now", pinned_strftime());
    const std::string what =
        name + " / " + c["conversation"].get<std::string>() +
        (c["variables"]["add_generation_prompt"] ? " + generation prompt" : "");
    ++n;
    try {
      const std::string got = t->render(vars);
      if (c.contains("error")) {
        ADD_FAILURE() << what << ": rendered, but jinja2 raised: " << c["error"];
      } else if (got != c["text"].get<std::string>()) {
        ADD_FAILURE() << what << ":\n--- want\n"
                      << c["text"].get<std::string>() << "\n--- got\n"
                      << got;
      } else {
        ++passed[name];
      }
    } catch (const Error& e) {
      if (!c.contains("error")) {
        ADD_FAILURE() << what << ": " << e.what();
      } else if (std::string(e.what()).find(c["error"].get<std::string>()) == std::string::npos) {
        ADD_FAILURE() << what << ": raised '" << e.what() << "', jinja2 raised " << c["error"];
      } else {
        ++passed[name];
      }
    }
  }
  EXPECT_GE(n, 150u);
  // Every template of the folder is covered.
  size_t n_files = 0;
  for (const auto& f : std::filesystem::directory_iterator(test_data("chat-templates"))) {
    n_files += f.path().extension() == ".jinja";
  }
  EXPECT_EQ(templates.size(), n_files);
  for (const auto& [name, k] : passed) std::printf("%-55s %d cases equal\n", name.c_str(), k);
}

TEST(JinjaGoldens, EachLanguageFeatureRendersAsJinja2) {
  const auto goldens =
      nlohmann::ordered_json::parse(read_text(test_data("chat-templates/goldens.json")));
  ASSERT_GE(goldens["language"].size(), 40u);
  for (const auto& c : goldens["language"]) {
    const std::string source = c["source"];
    Dict vars = std::move(*from_json(c["variables"]).dict);
    vars.set("strftime_now", pinned_strftime());
    try {
      const std::string got = Template(source, "case").render(vars);
      ASSERT_TRUE(c.contains("text")) << source << ": rendered, but jinja2 raised " << c["error"];
      EXPECT_EQ(got, c["text"].get<std::string>()) << source;
    } catch (const Error& e) {
      ADD_FAILURE() << source << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace strata::jinja
