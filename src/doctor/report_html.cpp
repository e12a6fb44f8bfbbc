// report_html.cpp -- the precision doctor's report as one HTML page.
//
// The page, top to bottom:
//   the title (h1), the summary line and a line of facts (steps, sampling
//   interval, latest sample, scaler);
//   "Findings": an ordered list (code, cause, parameter, steps, message),
//   or "No findings.";
//   "Scale history": an SVG chart of log2(scale) over the steps, a red tick
//   (class "overflow") at the foot of the chart for every skipped step, and
//   the sampled grad norm on its own log10 axis at the right; then a table
//   of the history's figures;
//   "Parameters": per parameter a section, id "param-<index>", with its
//   name, dtypes and elements, an SVG histogram of |gradient| by binade over
//   shaded bands of what fp16 makes of each binade, and a table of figures.
// Everything is inline -- CSS in one <style>, charts as <svg> -- so that the
// page can be mailed or archived alone; no script, no external reference.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "doctor/report.h"

namespace ampx::impl {
namespace doctor {
namespace {

constexpr char kStyle[] =
    "body{font:14px/1.45 system-ui,sans-serif;color:#222;max-width:980px;margin:1.5em auto;"
    "padding:0 1em}\n"
    "h2{margin-top:1.6em;border-bottom:1px solid #ccc}\n"
    "svg{display:block;width:100%;height:auto;margin:.5em 0}\n"
    "svg text{font-size:10px;fill:#333}\n"
    "svg .sup{font-size:7px}\n"
    "table{border-collapse:collapse;margin:.5em 0}\n"
    "th,td{padding:2px 12px 2px 0;border-bottom:1px solid #eee;text-align:left}\n"
    "td.num{text-align:right;font-variant-numeric:tabular-nums}\n"
    ".facts,.legend{color:#555;font-size:13px}\n"
    ".findings li{margin-bottom:.6em}\n"
    ".findings .message{display:block}\n"
    ".axis{stroke:#444;stroke-width:1}\n"
    ".grid{stroke:#e4e4e4;stroke-width:1}\n"
    ".scale{fill:none;stroke:#1f5fa8;stroke-width:1.5}\n"
    ".scale-dot{fill:#1f5fa8}\n"
    ".norm{fill:none;stroke:#d9822b;stroke-width:1}\n"
    ".norm-dot{fill:#d9822b}\n"
    ".overflow{stroke:#d62728;stroke-width:2}\n"
    ".bar{fill:#3b6fb6}\n"
    ".scaled-limit{stroke:#333;stroke-width:1;stroke-dasharray:4 3}\n"
    ".band-zero{fill:#e2e2e2}\n"
    ".band-subnormal{fill:#fbe6b0}\n"
    ".band-normal{fill:#dcefd4}\n"
    ".band-overflow{fill:#f6c4c4}\n"
    ".band-nonfinite{fill:#e58f8f}\n"
    ".key{display:inline-block;width:14px;height:10px;margin:0 4px 0 14px;"
    "vertical-align:middle}\n"
    ".key-scale{background:#1f5fa8}.key-norm{background:#d9822b}.key-skip{background:#d62728}\n"
    ".key-zero{background:#e2e2e2}.key-subnormal{background:#fbe6b0}"
    ".key-normal{background:#dcefd4}.key-overflow{background:#f6c4c4}"
    ".key-nonfinite{background:#e58f8f}\n"
    ".key-dash{border-top:2px dashed #333;height:0}\n";

// A history of up to 2^16 samples would otherwise put tens of thousands of
// points into each polyline, far more than a chart's width can show.
constexpr size_t kMaxSeriesPoints = 2000;

std::string escaped(std::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// std::to_chars, unlike printf and iostreams, ignores the C and C++ locales,
// which the application embedding the library may have changed.
std::string chars(double value, std::chars_format format, int precision) {
  char buf[48];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, value, format, precision);
  return std::string(buf, r.ptr);
}

std::string integer(int64_t value) {
  char buf[24];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, r.ptr);
}

// Table text: non-finite values spelled out rather than left to a formatter.
std::string number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return chars(value, std::chars_format::general, 6);
}

std::string percent(double fraction) {
  if (!std::isfinite(fraction)) return number(fraction);
  return chars(fraction * 100.0, std::chars_format::general, 4) + "%";
}

// Fractions the doctor marks as not measured by a negative value.
std::string measured_percent(double fraction) { return fraction < 0.0 ? "n/a" : percent(fraction); }

// Every SVG coordinate goes through here: whatever slipped past the callers'
// filtering, the markup keeps to finite numbers a renderer accepts.
std::string coord(double v) {
  if (!std::isfinite(v)) v = 0.0;
  return chars(std::clamp(v, -1e6, 1e6), std::chars_format::fixed, 1);
}

// "2" with a raised exponent, as SVG text.
std::string power_label(const char* base, double exponent) {
  return std::string(base) + "<tspan class=\"sup\" dy=\"-4\">" +
         chars(exponent, std::chars_format::fixed, 0) + "</tspan>";
}

// Maps [lo, hi] linearly onto [from, to]; a zero-width range onto its middle.
struct Axis {
  double lo;
  double hi;
  double from;
  double to;

  double operator()(double v) const {
    if (!(hi > lo)) return (from + to) / 2.0;
    return from + (v - lo) / (hi - lo) * (to - from);
  }
};

// Whole units around the values (at least one unit wide), so that the tick
// labels land on powers of the log axis' base.
Axis whole_unit_axis(const std::vector<double>& values, double from, double to) {
  if (values.empty()) return {0.0, 1.0, from, to};
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  double floor_lo = std::floor(*lo);
  double ceil_hi = std::ceil(*hi);
  if (ceil_hi == floor_lo) {
    floor_lo -= 1.0;
    ceil_hi += 1.0;
  }
  return {floor_lo, ceil_hi, from, to};
}

// A power-of-two stride of whole units, so that at most `max_ticks` ticks fit.
double power_of_two_stride(double span, double max_ticks) {
  double stride = 1.0;
  while (span / stride > max_ticks) stride *= 2.0;
  return stride;
}

// A 1-2-5 stride, so that at most eight step ticks fit.
double step_stride(double span) {
  for (double decade = 1.0;; decade *= 10.0) {
    for (const double m : {1.0, 2.0, 5.0}) {
      if (span / (m * decade) <= 8.0) return m * decade;
    }
  }
}

// The multiples of `stride` in [lo, hi], at most 16 of them: beyond 2^53
// adding the stride may not move a double.
std::vector<double> ticks(double lo, double hi, double stride) {
  std::vector<double> out;
  for (double t = std::ceil(lo / stride) * stride; t <= hi && out.size() < 16; t += stride) {
    out.push_back(t + 0.0);  // + 0.0 makes -0 a 0 that prints without its sign
  }
  return out;
}

struct Series {
  std::vector<double> steps;
  std::vector<double> values;  // the axis' logarithm of the quantity
};

// Which points of a series to draw: all when few; otherwise the first, the
// last, and the lowest and highest (in their order) of each of ~1000 equal
// slices -- so that a sawing scale keeps every peak and trough the chart's
// width could show.
std::vector<size_t> decimated(const std::vector<double>& values) {
  const size_t n = values.size();
  std::vector<size_t> keep;
  if (n <= kMaxSeriesPoints) {
    for (size_t i = 0; i < n; ++i) keep.push_back(i);
    return keep;
  }
  const size_t runs = (kMaxSeriesPoints - 2) / 2;
  keep.push_back(0);
  for (size_t run = 0; run < runs; ++run) {
    const size_t begin = run * n / runs;
    const size_t end = (run + 1) * n / runs;
    size_t low = begin;
    size_t high = begin;
    for (size_t i = begin + 1; i < end; ++i) {
      if (values[i] < values[low]) low = i;
      if (values[i] > values[high]) high = i;
    }
    for (const size_t i : {std::min(low, high), std::max(low, high)}) {
      if (i != keep.back()) keep.push_back(i);
    }
  }
  if (keep.back() != n - 1) keep.push_back(n - 1);
  return keep;
}

void append_series(std::string& out, const char* css_class, const Series& series, const Axis& x,
                   const Axis& y) {
  const std::vector<size_t> keep = decimated(series.values);
  if (keep.size() == 1) {
    // A one-point polyline draws nothing.
    out += "<circle class=\"" + std::string(css_class) + "-dot\" cx=\"" +
           coord(x(series.steps[0])) + "\" cy=\"" + coord(y(series.values[0])) + "\" r=\"2.5\"/>\n";
    return;
  }
  out += "<polyline class=\"" + std::string(css_class) + "\" points=\"";
  for (size_t k = 0; k < keep.size(); ++k) {
    if (k > 0) out += ' ';
    out += coord(x(series.steps[keep[k]])) + "," + coord(y(series.values[keep[k]]));
  }
  out += "\"/>\n";
}

void append_text(std::string& out, double x, double y, const char* anchor,
                 const std::string& markup) {
  out += "<text x=\"" + coord(x) + "\" y=\"" + coord(y) + "\" text-anchor=\"" + anchor + "\">" +
         markup + "</text>\n";
}

void append_vertical_text(std::string& out, double x, double y, const char* anchor,
                          const std::string& markup) {
  out += "<text transform=\"translate(" + coord(x) + " " + coord(y) +
         ") rotate(-90)\" text-anchor=\"" + anchor + "\">" + markup + "</text>\n";
}

void append_line(std::string& out, const char* css_class, double x1, double y1, double x2,
                 double y2) {
  out += "<line class=\"" + std::string(css_class) + "\" x1=\"" + coord(x1) + "\" y1=\"" +
         coord(y1) + "\" x2=\"" + coord(x2) + "\" y2=\"" + coord(y2) + "\"/>\n";
}

// Left open: a bar closes it after its <title> child.
void open_rect(std::string& out, const char* css_class, double x, double y, double width,
               double height) {
  out += "<rect class=\"" + std::string(css_class) + "\" x=\"" + coord(x) + "\" y=\"" + coord(y) +
         "\" width=\"" + coord(width) + "\" height=\"" + coord(height) + "\"";
}

void append_row(std::string& out, std::string_view label, const std::string& value) {
  out += "<tr><th>";
  out += label;
  out += "</th><td class=\"num\">" + value + "</td></tr>\n";
}

void append_facts(std::string& out, const Report& report) {
  out += "<p class=\"facts\">Steps seen: " + integer(report.steps) +
         " &middot; sampling interval: " + integer(report.interval) + " &middot; latest sample: ";
  if (report.sample_step > 0) {
    out += "step " + integer(report.sample_step) + " at scale " + number(report.sample_scale);
  } else {
    out += "none yet";
  }
  out += " &middot; scaler: " + escaped(report.scaler) + "</p>\n";
}

void append_findings(std::string& out, const Report& report) {
  out += "<h2 id=\"findings\">Findings</h2>\n";
  if (report.findings.empty()) {
    out += "<p>No findings.</p>\n";
    return;
  }
  out += "<ol class=\"findings\">\n";
  for (const FindingReport& f : report.findings) {
    out += "<li><strong>" + escaped(f.code) + "</strong>";
    if (!f.cause.empty()) out += " &middot; likely cause: " + escaped(f.cause);
    if (f.param >= 0) {
      const std::string label =
          f.param_name.empty() ? "parameter " + integer(f.param) : f.param_name;
      out += " &middot; parameter <a href=\"#param-" + integer(f.param) + "\">" + escaped(label) +
             "</a>";
    }
    out += " &middot; ";
    out += f.first_step == f.last_step
               ? "step " + integer(f.first_step)
               : "steps " + integer(f.first_step) + "&ndash;" + integer(f.last_step);
    out += "<span class=\"message\">" + escaped(f.message) + "</span></li>\n";
  }
  out += "</ol>\n";
}

void append_history_chart(std::string& out, const std::vector<SampleReport>& history) {
  constexpr double kWidth = 920.0;
  constexpr double kHeight = 290.0;
  constexpr double kLeft = 64.0;
  constexpr double kRight = kWidth - 64.0;
  constexpr double kTop = 14.0;
  constexpr double kBottom = 240.0;
  // The overflow ticks get the foot of the chart to themselves.
  constexpr double kTickZone = 16.0;

  Series scale;
  Series norm;
  std::vector<double> skipped;
  double first_step = static_cast<double>(history.front().step);
  double last_step = first_step;
  for (const SampleReport& s : history) {
    const double step = static_cast<double>(s.step);
    first_step = std::min(first_step, step);
    last_step = std::max(last_step, step);
    if (std::isfinite(s.scale) && s.scale > 0.0) {
      scale.steps.push_back(step);
      scale.values.push_back(std::log2(s.scale));
    }
    if (s.sampled && std::isfinite(s.grad_norm) && s.grad_norm > 0.0) {
      norm.steps.push_back(step);
      norm.values.push_back(std::log10(s.grad_norm));
    }
    if (s.found_inf) skipped.push_back(step);
  }

  const Axis x{first_step, last_step, kLeft, kRight};
  const Axis y = whole_unit_axis(scale.values, kBottom - kTickZone, kTop);
  const Axis y_norm = whole_unit_axis(norm.values, kBottom - kTickZone, kTop);

  out += "<svg viewBox=\"0 0 " + coord(kWidth) + " " + coord(kHeight) +
         "\" role=\"img\" aria-label=\"loss scale over the steps\">\n";
  for (const double e : ticks(y.lo, y.hi, power_of_two_stride(y.hi - y.lo, 8.0))) {
    append_line(out, "grid", kLeft, y(e), kRight, y(e));
    append_text(out, kLeft - 6.0, y(e) + 3.5, "end", power_label("2", e));
  }
  for (const double t : ticks(first_step, last_step, step_stride(last_step - first_step))) {
    append_line(out, "axis", x(t), kBottom, x(t), kBottom + 4.0);
    append_text(out, x(t), kBottom + 16.0, "middle", chars(t, std::chars_format::fixed, 0));
  }
  append_line(out, "axis", kLeft, kTop, kLeft, kBottom);
  append_line(out, "axis", kLeft, kBottom, kRight, kBottom);
  append_text(out, (kLeft + kRight) / 2.0, kBottom + 34.0, "middle", "step");
  append_vertical_text(out, 16.0, (kTop + kBottom) / 2.0, "middle", "loss scale (log2)");

  if (!scale.values.empty()) append_series(out, "scale", scale, x, y);
  if (!norm.values.empty()) {
    const double stride = power_of_two_stride(y_norm.hi - y_norm.lo, 8.0);
    for (const double e : ticks(y_norm.lo, y_norm.hi, stride)) {
      append_line(out, "axis", kRight, y_norm(e), kRight + 4.0, y_norm(e));
      append_text(out, kRight + 6.0, y_norm(e) + 3.5, "start", power_label("10", e));
    }
    append_line(out, "axis", kRight, kTop, kRight, kBottom);
    append_vertical_text(out, kWidth - 10.0, (kTop + kBottom) / 2.0, "middle",
                         "gradient norm (log10)");
    append_series(out, "norm", norm, x, y_norm);
  }
  // Drawn last and never decimated: a skipped step is the event a reader
  // looks for, and one merged away would hide it.
  for (const double step : skipped) {
    append_line(out, "overflow", x(step), kBottom - kTickZone + 3.0, x(step), kBottom);
  }
  out += "</svg>\n";

  out += "<p class=\"legend\"><span class=\"key key-scale\"></span>loss scale (left axis, log2)";
  if (!norm.values.empty()) {
    out += "<span class=\"key key-norm\"></span>gradient norm on sampled steps (right axis, log10)";
  }
  out += "<span class=\"key key-skip\"></span>overflow: the step was skipped</p>\n";
}

void append_history(std::string& out, const std::vector<SampleReport>& history) {
  out += "<h2 id=\"history\">Scale history</h2>\n";
  if (history.empty()) {
    out += "<p>No steps recorded yet.</p>\n";
    return;
  }
  append_history_chart(out, history);

  int64_t overflows = 0;
  int64_t sampled = 0;
  double min_scale = 0.0;
  double max_scale = 0.0;
  bool any_scale = false;
  for (const SampleReport& s : history) {
    overflows += s.found_inf;
    sampled += s.sampled;
    if (std::isnan(s.scale)) continue;
    min_scale = any_scale ? std::min(min_scale, s.scale) : s.scale;
    max_scale = any_scale ? std::max(max_scale, s.scale) : s.scale;
    any_scale = true;
  }
  out += "<table>\n";
  append_row(out, "steps in the history", integer(static_cast<int64_t>(history.size())));
  append_row(out, "first step", integer(history.front().step));
  append_row(out, "last step", integer(history.back().step));
  append_row(out, "min scale", any_scale ? number(min_scale) : "NaN");
  append_row(out, "max scale", any_scale ? number(max_scale) : "NaN");
  append_row(out, "latest scale", number(history.back().scale));
  append_row(out, "overflow steps", integer(overflows));
  append_row(out, "sampled steps", integer(sampled));
  out += "</table>\n";
}

// The histogram's columns: the zero and tiny bins, a gap, the binades
// 2^-64 .. 2^15 side by side, a gap, the huge and non-finite bins.
constexpr double kBinWidth = 10.0;
constexpr double kBinGap = 8.0;
constexpr double kHistogramLeft = 60.0;
constexpr double kFirstBinadeX = kHistogramLeft + 2.0 * kBinWidth + kBinGap;

// Where |u| = 2^exponent falls (fractional exponents inside their binade).
double binade_x(double exponent) {
  return kFirstBinadeX + (exponent - math::kGradStatsMinExponent) * kBinWidth;
}

double bin_x(int bin) {
  if (bin < math::kGradStatsBinFirstBinade) return kHistogramLeft + bin * kBinWidth;
  if (bin < math::kGradStatsBinHuge) {
    return binade_x(math::kGradStatsMinExponent + (bin - math::kGradStatsBinFirstBinade));
  }
  return binade_x(math::kGradStatsMaxExponent + 1) + kBinGap +
         (bin - math::kGradStatsBinHuge) * kBinWidth;
}

std::string bin_range(int bin) {
  if (bin == 0) return "exactly 0";
  if (bin == math::kGradStatsBinTiny) {
    return "0 &lt; |g| &lt; 2^" + integer(math::kGradStatsMinExponent);
  }
  if (bin == math::kGradStatsBinHuge)
    return "|g| &#8805; 2^" + integer(math::kGradStatsMaxExponent + 1);
  if (bin == math::kGradStatsBinNonfinite) return "inf or NaN";
  const int e = math::kGradStatsMinExponent + (bin - math::kGradStatsBinFirstBinade);
  return "2^" + integer(e) + " &#8804; |g| &lt; 2^" + integer(e + 1);
}

// The histogram marks where fp16's limits fall for the gradients as stored
// only when that differs from the bands, which are of the unscaled gradient.
bool marks_scaled_limits(double sample_scale) {
  return std::isfinite(sample_scale) && sample_scale > 0.0 && sample_scale != 1.0;
}

void append_histogram(std::string& out, const ParamReport& p, double sample_scale) {
  constexpr double kWidth =
      kHistogramLeft + math::kGradStatsBins * kBinWidth + 2.0 * kBinGap + 20.0;
  // The bands reach above the tallest bar, to carry their names.
  constexpr double kBandTop = 4.0;
  constexpr double kTop = 22.0;
  constexpr double kBottom = 190.0;
  constexpr double kHeight = kBottom + 58.0;

  out += "<svg viewBox=\"0 0 " + coord(kWidth) + " " + coord(kHeight) +
         "\" role=\"img\" aria-label=\"histogram of the gradient magnitudes\">\n";
  // fp16 rounds to nearest even: |u| <= 2^-25 becomes 0, (2^-25, 2^-14) a
  // subnormal, up to 65504 (65520 excluded) a normal number, beyond that inf.
  // At the binade resolution the edges are 2^-25, 2^-14 and 2^16.
  struct Band {
    const char* css_class;
    double from;
    double to;
    const char* label;  // above the bars, where the band is wide enough for it
  };
  const double huge_x = bin_x(math::kGradStatsBinHuge) - kBinGap;
  const double nonfinite_x = bin_x(math::kGradStatsBinNonfinite);
  const Band bands[] = {
      {"band-zero", bin_x(math::kGradStatsBinTiny), binade_x(-25), "rounds to 0 in fp16"},
      {"band-subnormal", binade_x(-25), binade_x(-14), "subnormal"},
      {"band-normal", binade_x(-14), huge_x, "normal"},
      {"band-overflow", huge_x, nonfinite_x, ""},
      {"band-nonfinite", nonfinite_x, nonfinite_x + kBinWidth, ""},
  };
  for (const Band& band : bands) {
    open_rect(out, band.css_class, band.from, kBandTop, band.to - band.from, kBottom - kBandTop);
    out += "/>\n";
    if (*band.label)
      append_text(out, (band.from + band.to) / 2.0, kBandTop + 11.0, "middle", band.label);
  }
  const double right = nonfinite_x + kBinWidth;

  // Heights are log10(count + 1) over the largest, so that a handful of
  // elements in an unlucky binade still shows beside millions elsewhere.
  // The counts go through double: count + 1 could overflow int64.
  int64_t max_count = 0;
  for (const int64_t c : p.histogram) max_count = std::max(max_count, c);
  const double top_log = std::log10(static_cast<double>(max_count) + 1.0);
  const Axis y{0.0, top_log > 0.0 ? top_log : 1.0, kBottom, kTop};
  for (int bin = 0; bin < math::kGradStatsBins; ++bin) {
    const int64_t c = p.histogram[static_cast<size_t>(bin)];
    if (c <= 0) continue;
    const double top = y(std::log10(static_cast<double>(c) + 1.0));
    open_rect(out, "bar", bin_x(bin) + 1.0, top, kBinWidth - 2.0, kBottom - top);
    out += "><title>" + bin_range(bin) + ": " + integer(c) + " elements</title></rect>\n";
  }

  // Where fp16's zero and overflow limits fall for the gradients as stored,
  // which carry the loss scale: the bands shifted left by log2(scale).
  if (marks_scaled_limits(sample_scale)) {
    const double shift = std::log2(sample_scale);
    for (const double edge : {-25.0 - shift, 16.0 - shift}) {
      if (edge < math::kGradStatsMinExponent || edge > math::kGradStatsMaxExponent + 1) continue;
      append_line(out, "scaled-limit", binade_x(edge), kTop, binade_x(edge), kBottom);
    }
  }

  append_line(out, "axis", kHistogramLeft, kBottom, right, kBottom);
  append_line(out, "axis", kHistogramLeft, kTop, kHistogramLeft, kBottom);
  append_text(out, kHistogramLeft - 5.0, kBottom + 3.5, "end", "0");
  if (max_count > 0) {
    append_text(out, kHistogramLeft - 5.0, kTop + 3.5, "end",
                number(static_cast<double>(max_count)));
  }
  const double decade_stride = power_of_two_stride(top_log, 5.0);
  for (const double k : ticks(decade_stride, top_log, decade_stride)) {
    const double at = y(std::log10(std::pow(10.0, k) + 1.0));
    if (at - kTop < 12.0) break;
    append_line(out, "axis", kHistogramLeft - 3.0, at, kHistogramLeft, at);
    append_text(out, kHistogramLeft - 5.0, at + 3.5, "end", power_label("10", k));
  }
  append_vertical_text(out, 14.0, (kTop + kBottom) / 2.0, "middle", "elements (log of count+1)");

  const double label_y = kBottom + 6.0;
  const auto label_bin = [&](int bin, const std::string& markup) {
    append_vertical_text(out, bin_x(bin) + kBinWidth / 2.0 + 3.5, label_y, "end", markup);
  };
  label_bin(0, "0");
  label_bin(math::kGradStatsBinTiny, "tiny");
  for (const int e : {-64, -48, -24, -14, 0, 15}) {
    label_bin(math::kGradStatsBinFirstBinade + (e - math::kGradStatsMinExponent),
              power_label("2", e));
  }
  label_bin(math::kGradStatsBinHuge, "huge");
  label_bin(math::kGradStatsBinNonfinite, "inf/NaN");
  out += "</svg>\n";
}

void append_parameter(std::string& out, const ParamReport& p, double sample_scale) {
  const std::string index = integer(p.index);
  out += "<section id=\"param-" + index + "\">\n<h3>";
  out += p.name.empty() ? "parameter " + index : escaped(p.name);
  out += "</h3>\n<p class=\"facts\">parameter " + escaped(p.param_dtype) + " &middot; gradient " +
         escaped(p.grad_dtype) + " &middot; " + integer(p.elements) + " elements</p>\n";
  append_histogram(out, p, sample_scale);

  out += "<table>\n";
  append_row(out, "amax (true gradient)", number(p.amax));
  append_row(out, "amax as stored, at the scale", number(p.amax_scaled));
  append_row(out, "gradient norm", number(p.grad_norm));
  append_row(out, "zero in fp16, unscaled", percent(p.fp16_zero_unscaled));
  append_row(out, "subnormal in fp16, unscaled", percent(p.fp16_subnormal_unscaled));
  append_row(out, "zero in fp16, at the scale", percent(p.fp16_zero_scaled));
  append_row(out, "subnormal in fp16, at the scale", percent(p.fp16_subnormal_scaled));
  append_row(out, "overflow in fp16, at the scale", percent(p.fp16_overflow_scaled));
  append_row(out, "non-zero, lost to fp16 at the scale", percent(p.nonzero_lost_scaled));
  append_row(out, "headroom",
             p.has_headroom ? integer(p.headroom) + " doublings of the scale" : "unbounded");
  append_row(out, "master weight changed", measured_percent(p.master_changed_fraction));
  append_row(out, "lost updates", measured_percent(p.lost_update_fraction));
  append_row(out, "lost updates without a master",
             measured_percent(p.lost_without_master_fraction));
  out += "</table>\n</section>\n";
}

void append_parameters(std::string& out, const Report& report) {
  out += "<h2 id=\"parameters\">Parameters</h2>\n";
  if (report.params.empty()) {
    out += "<p>No parameter statistics yet: no step has been sampled.</p>\n";
    return;
  }
  out +=
      "<p class=\"legend\">Histograms of |g|, the gradient without the loss scale, by binade. "
      "Shading: what fp16 makes of a binade &ndash; "
      "<span class=\"key key-zero\"></span>rounds to 0 (&le; 2<sup>-25</sup>)"
      "<span class=\"key key-subnormal\"></span>subnormal"
      "<span class=\"key key-normal\"></span>normal"
      "<span class=\"key key-overflow\"></span>overflows (&ge; 65520)"
      "<span class=\"key key-nonfinite\"></span>already inf or NaN";
  if (marks_scaled_limits(report.sample_scale)) {
    out +=
        "<span class=\"key key-dash\"></span>fp16&#39;s zero and overflow limits for the "
        "gradients as stored, at the sample&#39;s scale " +
        number(report.sample_scale);
  }
  out += "</p>\n";
  for (const ParamReport& p : report.params) append_parameter(out, p, report.sample_scale);
}

}  // namespace

std::string render_html(const Report& report) {
  const std::string title = escaped(report.title.empty() ? "ampx precision doctor" : report.title);
  std::string out;
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>" + title + "</title>\n<style>\n";
  out += kStyle;
  out += "</style>\n</head>\n<body>\n<h1>" + title + "</h1>\n";
  if (!report.summary.empty()) out += "<p class=\"summary\">" + escaped(report.summary) + "</p>\n";
  append_facts(out, report);
  append_findings(out, report);
  append_history(out, report.history);
  append_parameters(out, report);
  out += "</body>\n</html>\n";
  return out;
}

}  // namespace doctor
}  // namespace ampx::impl
