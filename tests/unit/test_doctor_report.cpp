// test_doctor_report.cpp -- the precision doctor's HTML page (doctor/report.h):
// one self-contained document, every report string escaped, an overflow
// mark for every skipped step however long the history, and SVG geometry
// made of finite numbers whatever the report holds.
#include <doctest/doctest.h>

#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "doctor/report.h"
#include "math/grad_stats.h"

namespace {

using ampx::impl::doctor::FindingReport;
using ampx::impl::doctor::ParamReport;
using ampx::impl::doctor::render_html;
using ampx::impl::doctor::Report;
using ampx::impl::doctor::SampleReport;
namespace math = ampx::impl::math;

const char kHostileName[] = "encoder.<script>&\"'";
const char kHostileEscaped[] = "encoder.&lt;script&gt;&amp;&quot;&#39;";
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

int64_t count_overflows(const Report& r) {
  int64_t n = 0;
  for (const SampleReport& s : r.history) n += s.found_inf;
  return n;
}

// Every value of the geometry attributes holds only digits, signs, points,
// commas and spaces: no NaN, no inf, no exponent a renderer might refuse.
void check_geometry(const std::string& html) {
  for (const char* name :
       {" x=\"", " y=\"", " x1=\"", " y1=\"", " x2=\"", " y2=\"", " cx=\"", " cy=\"", " r=\"",
        " width=\"", " height=\"", " points=\"", " viewBox=\"", " dy=\"", "translate("}) {
    const std::string needle = name;
    for (size_t at = html.find(needle); at != std::string::npos; at = html.find(needle, at + 1)) {
      const size_t begin = at + needle.size();
      const size_t end = html.find_first_of("\")", begin);
      REQUIRE(end != std::string::npos);
      const std::string value = html.substr(begin, end - begin);
      INFO(name, value);
      CHECK(value.find_first_not_of("0123456789.-, ") == std::string::npos);
    }
  }
  const std::string folded = lower(html);
  for (const char* bad : {"=\"nan", "=\"-nan", "=\"inf", "=\"-inf", ",nan", ",inf", ",-nan"}) {
    INFO(bad);
    CHECK(folded.find(bad) == std::string::npos);
  }
}

void check_self_contained(const std::string& html) {
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  const std::string folded = lower(html);
  for (const char* bad : {"<script", "http", "src=", "@import", "url(", "<link", "//"}) {
    INFO(bad);
    CHECK(folded.find(bad) == std::string::npos);
  }
  // Links stay inside the page.
  for (size_t at = folded.find("href=\""); at != std::string::npos;
       at = folded.find("href=\"", at + 1)) {
    CHECK(folded.compare(at + 6, 1, "#") == 0);
  }
}

Report sample_report(size_t history_length) {
  Report r;
  r.title = "ampx precision doctor";
  r.summary = "4000 steps; 2 findings: scale_oscillation, scale_too_low";
  r.steps = static_cast<int64_t>(history_length);
  r.interval = 10;
  r.sample_step = r.steps - 5;
  r.sample_scale = 65536.0;
  r.scaler = "dynamic: x2 every 2000 clean steps, x0.5 on overflow";

  ParamReport a;
  a.name = kHostileName;
  a.index = 0;
  a.param_dtype = "f16";
  a.grad_dtype = "f16";
  a.elements = 1 << 20;
  a.histogram[0] = 100;
  a.histogram[math::kGradStatsBinTiny] = 3;
  for (int e = -40; e <= -2; ++e) {
    a.histogram[static_cast<size_t>(math::kGradStatsBinFirstBinade + e -
                                    math::kGradStatsMinExponent)] = 1000 * (41 + e);
  }
  a.histogram[math::kGradStatsBinNonfinite] = 1;
  a.amax = 0.24;
  a.amax_scaled = 15728.6;
  a.grad_norm = 3.5;
  a.fp16_zero_unscaled = 0.125;
  a.fp16_subnormal_unscaled = 0.0625;
  a.fp16_zero_scaled = 0.001;
  a.fp16_subnormal_scaled = 0.002;
  a.fp16_overflow_scaled = 0.0;
  a.nonzero_lost_scaled = 0.003;
  a.headroom = 2;
  a.has_headroom = true;
  a.lost_update_fraction = 0.015;
  a.lost_without_master_fraction = 0.4;
  a.master_changed_fraction = 0.99;

  ParamReport b;  // unnamed, fp32, nothing measured
  b.index = 1;
  b.param_dtype = "f32";
  b.grad_dtype = "f32";
  b.elements = 64;
  b.histogram[0] = 64;

  r.params = {a, b};

  for (size_t i = 0; i < history_length; ++i) {
    SampleReport s;
    s.step = static_cast<int64_t>(i) + 1;
    s.scale = std::ldexp(1.0, 10 + static_cast<int>(i % 300) / 50);
    s.found_inf = i % 97 == 13;
    s.sampled = i % 10 == 0;
    if (s.sampled) s.grad_norm = i % 50 == 0 ? kNaN : 0.5 + 1e-3 * static_cast<double>(i);
    r.history.push_back(s);
  }

  FindingReport oscillation;
  oscillation.code = "scale_oscillation";
  oscillation.cause = "learning_rate";
  oscillation.first_step = 100;
  oscillation.last_step = 3900;
  oscillation.message = "The scale backs off every few hundred steps & grows <back>.";
  FindingReport too_low;
  too_low.code = "scale_too_low";
  too_low.param_name = kHostileName;
  too_low.param = 0;
  too_low.first_step = 3995;
  too_low.last_step = 3995;
  too_low.message = "Gradients of the parameter are lost to fp16's subnormal range.";
  r.findings = {oscillation, too_low};
  return r;
}

TEST_CASE("doctor report: a full report is one self-contained, escaped page") {
  const Report r = sample_report(4000);
  const std::string html = render_html(r);
  check_self_contained(html);
  check_geometry(html);

  CHECK(html.find(kHostileName) == std::string::npos);
  CHECK(html.find("<script>&") == std::string::npos);
  CHECK(count(html, kHostileEscaped) >= 2);  // the section heading and the finding
  CHECK(html.find("&amp; grows &lt;back&gt;.") != std::string::npos);

  CHECK(html.find("No findings.") == std::string::npos);
  CHECK(html.find("scale_oscillation") != std::string::npos);
  CHECK(html.find("steps 100&ndash;3900") != std::string::npos);
  CHECK(html.find("<a href=\"#param-0\">" + std::string(kHostileEscaped) + "</a>") !=
        std::string::npos);

  CHECK(count(html, "<section id=\"param-0\">") == 1);
  CHECK(count(html, "<section id=\"param-1\">") == 1);
  CHECK(html.find("<h3>parameter 1</h3>") != std::string::npos);
  CHECK(html.find("unbounded") != std::string::npos);
  CHECK(html.find("n/a") != std::string::npos);
  CHECK(html.find("1.5%") != std::string::npos);
  CHECK(count(html, "class=\"bar\"") == 42 + 1);  // a: zero, tiny, 39 binades, non-finite

  CHECK(count(html, "class=\"overflow\"") == count_overflows(r));
  CHECK(count(html, "<polyline class=\"scale\"") == 1);
  CHECK(count(html, "<polyline class=\"norm\"") == 1);

  // Findings, then the history, then the parameters.
  const size_t findings = html.find("id=\"findings\"");
  const size_t history = html.find("id=\"history\"");
  const size_t params = html.find("id=\"param-0\"");
  CHECK(findings < history);
  CHECK(history < params);
}

TEST_CASE("doctor report: a long history is decimated but keeps every overflow mark") {
  Report r = sample_report(65536);
  for (size_t i = 0; i < r.history.size(); i += 13) r.history[i].found_inf = true;
  const std::string html = render_html(r);
  check_geometry(html);
  CHECK(count(html, "class=\"overflow\"") == count_overflows(r));

  const size_t at = html.find("<polyline class=\"scale\" points=\"");
  REQUIRE(at != std::string::npos);
  const size_t end = html.find('"', html.find("points=\"", at) + 8);
  const std::string points = html.substr(at, end - at);
  CHECK(count(points, ",") <= 2000);
  CHECK(count(points, ",") >= 1000);
  CHECK(html.size() < 1024 * 1024);
}

TEST_CASE("doctor report: an empty report still reads sensibly") {
  const std::string html = render_html(Report{});
  check_self_contained(html);
  check_geometry(html);
  CHECK(html.find("No findings.") != std::string::npos);
  CHECK(html.find("No steps recorded yet") != std::string::npos);
  CHECK(html.find("No parameter statistics yet") != std::string::npos);
  CHECK(html.find("<svg") == std::string::npos);
  CHECK(html.find("</html>") != std::string::npos);
}

TEST_CASE("doctor report: NaN, inf and extreme numbers stay out of the SVG geometry") {
  Report r;
  r.sample_step = 7;
  r.sample_scale = kNaN;
  const double scales[] = {kNaN, kInf, 0.0, -4.0, 1e300, 5e-324, 1.0, -kInf};
  for (size_t i = 0; i < 8; ++i) {
    SampleReport s;
    s.step = i == 7 ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(i);
    s.scale = scales[i];
    s.found_inf = i % 2 == 0;
    s.sampled = true;
    s.grad_norm = i % 3 == 0 ? kInf : (i % 3 == 1 ? kNaN : 1e300);
    r.history.push_back(s);
  }
  ParamReport p;
  p.index = 3;
  p.amax = kNaN;
  p.amax_scaled = kInf;
  p.grad_norm = -kInf;
  p.fp16_zero_unscaled = kNaN;
  p.lost_update_fraction = kNaN;
  p.histogram.fill(std::numeric_limits<int64_t>::max());
  p.histogram[5] = -1;
  r.params.push_back(p);

  const std::string html = render_html(r);
  check_self_contained(html);
  check_geometry(html);
  CHECK(count(html, "class=\"overflow\"") == count_overflows(r));
  CHECK(html.find("<td class=\"num\">NaN</td>") != std::string::npos);
  CHECK(html.find("<td class=\"num\">inf</td>") != std::string::npos);
  CHECK(html.find("<td class=\"num\">-inf</td>") != std::string::npos);
  CHECK(html.find("<section id=\"param-3\">") != std::string::npos);

  // A single sample draws a dot, not an empty polyline.
  Report one;
  one.history.resize(1);
  const std::string single = render_html(one);
  check_geometry(single);
  CHECK(single.find("<circle class=\"scale-dot\"") != std::string::npos);
}

}  // namespace
