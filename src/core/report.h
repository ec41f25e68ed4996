// Report: the table every `minigpt bench ...` command prints, as markdown (default), JSON or
// CSV (`-o md|json|csv`), headed by the machine, the build and the version, so that a figure
// never travels without the context that produced it.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace minigpt {

enum class ReportFormat { Markdown, Json, Csv };
ReportFormat parse_report_format(const std::string& name);  // "md" | "json" | "csv"

class Report {
 public:
  Report(std::string title, std::vector<std::string> columns, int threads);

  // Extra header facts ("device": "cuda", "l2_flush": "yes", ...), printed above the table.
  void set_meta(const std::string& key, nlohmann::json value);
  // One row; cells are numbers or strings, in column order. Numbers print with `digits`
  // significant digits in markdown and CSV, and exactly in JSON.
  void add_row(std::vector<nlohmann::json> cells);
  void add_note(std::string note);  // free text under the table (markdown only; "notes" in JSON)

  std::string render(ReportFormat format, int digits = 4) const;
  nlohmann::json to_json() const;

 private:
  std::string title_;
  std::vector<std::string> columns_;
  nlohmann::json meta_;
  std::vector<std::vector<nlohmann::json>> rows_;
  std::vector<std::string> notes_;
};

}  // namespace minigpt
