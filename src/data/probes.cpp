// Probe files and probe scoring (see probes.h).
#include "data/probes.h"

#include "core/error.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

namespace minigpt::data {

namespace {

bool valid_category(std::string_view c) {
  return !c.empty() && std::all_of(c.begin(), c.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_';
  });
}

}  // namespace

std::vector<Probe> parse_probes(std::string_view text, const std::string& source) {
  const std::vector<std::string> classes = Grammar::class_names();
  std::vector<Probe> probes;
  int line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos || line.front() == '#') continue;
    std::vector<std::string_view> fields;
    size_t start = 0;
    for (size_t tab; (tab = line.find('\t', start)) != std::string_view::npos; start = tab + 1)
      fields.push_back(line.substr(start, tab - start));
    fields.push_back(line.substr(start));
    MINIGPT_CHECK(fields.size() == 3, "{}:{}: expected 3 tab-separated fields (category, prompt, class), got {}",
                  source, line_no, fields.size());
    MINIGPT_CHECK(valid_category(fields[0]), "{}:{}: category '{}' must be [a-z0-9_]+", source, line_no, fields[0]);
    MINIGPT_CHECK(!Tokenizer::split(fields[1]).empty(), "{}:{}: empty prompt", source, line_no);
    MINIGPT_CHECK(std::find(classes.begin(), classes.end(), fields[2]) != classes.end(),
                  "{}:{}: unknown word class '{}'", source, line_no, fields[2]);
    probes.push_back({std::string(fields[0]), std::string(fields[1]), std::string(fields[2]), line_no});
  }
  return probes;
}

std::vector<Probe> load_probes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MINIGPT_CHECK(in.good(), "cannot open probe file '{}'", path);
  std::ostringstream text;
  text << in.rdbuf();
  std::vector<Probe> probes = parse_probes(text.str(), path);
  MINIGPT_CHECK(!probes.empty(), "probe file '{}' holds no probes", path);
  return probes;
}

std::vector<int32_t> probe_input_ids(const Probe& probe, const Tokenizer& tokenizer) {
  const Tokenizer::Encoded e = tokenizer.encode(probe.prompt);
  if (!e.unknown.empty()) {
    std::string missing;
    for (const std::string& w : e.unknown) missing += (missing.empty() ? "'" : ", '") + w + "'";
    MINIGPT_FAIL("probe line {} '{}': {} not in the model's vocabulary", probe.line, probe.prompt, missing);
  }
  std::vector<int32_t> ids = {Tokenizer::kBos};
  ids.insert(ids.end(), e.ids.begin(), e.ids.end());
  return ids;
}

std::vector<int32_t> class_ids(const Grammar& grammar, std::string_view word_class, const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  std::string missing;
  for (const std::string& w : grammar.word_class(word_class)) {
    const int32_t id = tokenizer.id(w);
    if (id == Tokenizer::kUnk)
      missing += (missing.empty() ? "'" : ", '") + w + "'";
    else
      ids.push_back(id);
  }
  MINIGPT_CHECK(missing.empty(), "word class '{}': {} not in the model's vocabulary", word_class, missing);
  std::sort(ids.begin(), ids.end());
  return ids;
}

ProbeReport score_probes(const std::vector<Probe>& probes, const Grammar& grammar, const Tokenizer& tokenizer,
                         const std::function<int32_t(std::span<const int32_t>)>& top1) {
  std::map<std::string, std::vector<int32_t>> classes;
  std::vector<std::vector<int32_t>> inputs;
  for (const Probe& p : probes) {
    if (!classes.count(p.word_class)) classes[p.word_class] = class_ids(grammar, p.word_class, tokenizer);
    inputs.push_back(probe_input_ids(p, tokenizer));
  }
  ProbeReport report;
  for (size_t i = 0; i < probes.size(); ++i) {
    const Probe& p = probes[i];
    const int32_t predicted = top1(inputs[i]);
    const std::vector<int32_t>& ok = classes[p.word_class];
    const bool correct = std::binary_search(ok.begin(), ok.end(), predicted);
    report.outcomes.push_back({&p, predicted, correct});
    auto it = std::find_if(report.categories.begin(), report.categories.end(),
                           [&](const CategoryScore& c) { return c.category == p.category; });
    if (it == report.categories.end()) it = report.categories.insert(report.categories.end(), {p.category});
    it->total += 1;
    it->correct += correct;
    report.overall.total += 1;
    report.overall.correct += correct;
  }
  return report;
}

}  // namespace minigpt::data
