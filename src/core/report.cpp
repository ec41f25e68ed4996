#include "core/report.h"

#include "core/device_info.h"
#include "core/error.h"
#include "minigpt/build_info.h"

#include <fmt/format.h>

#include <cmath>

namespace minigpt {

ReportFormat parse_report_format(const std::string& name) {
  if (name == "md" || name == "markdown") return ReportFormat::Markdown;
  if (name == "json") return ReportFormat::Json;
  if (name == "csv") return ReportFormat::Csv;
  MINIGPT_FAIL("unknown output format '{}' (expected md, json or csv)", name);
}

Report::Report(std::string title, std::vector<std::string> columns, int threads)
    : title_(std::move(title)), columns_(std::move(columns)) {
  const CpuInfo& c = cpu_info();
  meta_["machine"] = machine_summary(threads);
  meta_["cpu"] = c.brand;
  meta_["threads"] = threads;
  meta_["build"] = fmt::format("minigpt {} ({}), {} {}{}", build::kVersion, build::kGitRevision,
                               build::kCompiler, build::kBuildType,
                               MINIGPT_WITH_CUDA ? fmt::format(", CUDA {}", build::kCudaVersion) : "");
  meta_["version"] = build::kVersion;
}

void Report::set_meta(const std::string& key, nlohmann::json value) { meta_[key] = std::move(value); }

void Report::add_row(std::vector<nlohmann::json> cells) {
  MINIGPT_CHECK(cells.size() == columns_.size(), "report row has {} cells for {} columns",
                cells.size(), columns_.size());
  rows_.push_back(std::move(cells));
}

void Report::add_note(std::string note) { notes_.push_back(std::move(note)); }

static std::string cell_text(const nlohmann::json& v, int digits) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  if (v.is_number()) {
    const double x = v.get<double>();
    if (!std::isfinite(x)) return fmt::format("{}", x);
    return fmt::format("{:.{}g}", x, digits);
  }
  return v.dump();
}

nlohmann::json Report::to_json() const {
  nlohmann::json j;
  j["title"] = title_;
  j["meta"] = meta_;
  j["columns"] = columns_;
  j["rows"] = nlohmann::json::array();
  for (const auto& row : rows_) {
    nlohmann::json r;
    for (size_t i = 0; i < columns_.size(); ++i) r[columns_[i]] = row[i];
    j["rows"].push_back(r);
  }
  j["notes"] = notes_;
  return j;
}

std::string Report::render(ReportFormat format, int digits) const {
  if (format == ReportFormat::Json) return to_json().dump(2) + "\n";
  std::string out;
  if (format == ReportFormat::Csv) {
    // The context travels as '#' comment lines (pandas: read_csv(..., comment='#')).
    for (const auto& [key, value] : meta_.items())
      out += fmt::format("# {}: {}\n", key, value.is_string() ? value.get<std::string>() : value.dump());
    for (size_t i = 0; i < columns_.size(); ++i) out += (i ? "," : "") + columns_[i];
    out += "\n";
    for (const auto& row : rows_) {
      for (size_t i = 0; i < row.size(); ++i) out += (i ? "," : "") + cell_text(row[i], digits);
      out += "\n";
    }
    return out;
  }
  out += "## " + title_ + "\n\n";
  for (const auto& [key, value] : meta_.items())
    out += fmt::format("- {}: {}\n", key, value.is_string() ? value.get<std::string>() : value.dump());
  out += "\n|";
  for (const auto& c : columns_) out += " " + c + " |";
  out += "\n|";
  for (size_t i = 0; i < columns_.size(); ++i) out += " --- |";
  out += "\n";
  for (const auto& row : rows_) {
    out += "|";
    for (const auto& cell : row) out += " " + cell_text(cell, digits) + " |";
    out += "\n";
  }
  for (const auto& n : notes_) out += "\n" + n + "\n";
  return out;
}

}  // namespace minigpt
