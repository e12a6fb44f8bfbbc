/*
 * chart.c -- the demo's picture, an SVG written by hand (no Python, no
 * plotting library): the training loss on a log scale above the loss scale
 * on a log2 scale, both against the step, one curve per precision.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "demo.h"

enum { kWidth = 900, kHeight = 700, kLeft = 90, kRight = 30 };

/* Vertical extent of the two panels; they share the step axis. */
enum { kLossTop = 70, kLossBottom = 380, kScaleTop = 430, kScaleBottom = 630 };

static const char *const kFont = "DejaVu Sans, Helvetica, Arial, sans-serif";

typedef struct axis {
  double lo, hi;       /* data range (log10 loss, log2 scale, or steps) */
  double pixel_lo, pixel_hi;
} axis;

static double map(const axis *a, double v) {
  return a->pixel_lo + (v - a->lo) / (a->hi - a->lo) * (a->pixel_hi - a->pixel_lo);
}

/* A round step (1, 2 or 5 times a power of ten) giving at most `most`
 * intervals over `span`, so tick labels read naturally. */
static double nice_step(double span, int most) {
  double raw = span / most;
  double power = pow(10.0, floor(log10(raw)));
  double steps[3] = {1.0, 2.0, 5.0};
  for (int i = 0; i < 3; ++i)
    if (steps[i] * power >= raw) return steps[i] * power;
  return 10.0 * power;
}

static void text(FILE *f, double x, double y, const char *anchor, int size, const char *weight,
                 const char *body) {
  fprintf(f,
          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\" "
          "font-weight=\"%s\">%s</text>\n",
          x, y, anchor, size, weight, body);
}

static void panel_frame(FILE *f, double top, double bottom) {
  fprintf(f,
          "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%.1f\" fill=\"white\" "
          "stroke=\"#444\" stroke-width=\"1\"/>\n",
          kLeft, top, kWidth - kLeft - kRight, bottom - top);
}

static void grid_line(FILE *f, double y, const char *colour) {
  fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\"/>\n", kLeft, y,
          kWidth - kRight, y, colour);
}

/* A power as base and raised exponent, e.g. 10 with -3 above it. */
static void power_label(FILE *f, double x, double y, int base, int exponent) {
  fprintf(f,
          "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"13\">%d"
          "<tspan dy=\"-6\" font-size=\"10\">%d</tspan></text>\n",
          x, y, base, exponent);
}

static void curve(FILE *f, const demo_series *s, const axis *xs, const axis *ys, int use_loss) {
  const demo_result *r = s->result;
  fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" stroke-dasharray=\"%s\" "
             "stroke-linejoin=\"round\" points=\"",
          s->colour, s->dash[0] ? s->dash : "none");
  for (int i = 0; i < r->points; ++i) {
    double v = use_loss ? log10(r->losses[i]) : log2(r->scales[i]);
    if (!isfinite(v)) continue;
    fprintf(f, "%.1f,%.1f ", map(xs, r->steps[i]), map(ys, v));
  }
  fprintf(f, "\"/>\n");
}

int demo_write_chart_svg(const char *path, const char *title, const demo_series *series,
                         int count, int total_steps) {
  /* Ranges over every curve: whole decades of loss, whole powers of two of
   * scale (always including 1, where the unscaled runs sit). */
  double loss_min = INFINITY, loss_max = -INFINITY, scale_min = 0.0, scale_max = 1.0;
  for (int s = 0; s < count; ++s) {
    const demo_result *r = series[s].result;
    for (int i = 0; i < r->points; ++i) {
      if (r->losses[i] > 0.0 && isfinite(r->losses[i])) {
        loss_min = fmin(loss_min, log10(r->losses[i]));
        loss_max = fmax(loss_max, log10(r->losses[i]));
      }
      scale_min = fmin(scale_min, floor(log2(r->scales[i])));
      scale_max = fmax(scale_max, ceil(log2(r->scales[i])));
    }
  }
  if (!isfinite(loss_min)) loss_min = -1.0, loss_max = 0.0;
  axis loss_axis = {floor(loss_min), ceil(loss_max), kLossBottom, kLossTop};
  if (loss_axis.hi <= loss_axis.lo) loss_axis.hi = loss_axis.lo + 1.0;
  /* A power of two of headroom either side keeps the curves off the frame. */
  axis scale_axis = {scale_min - 1.0, scale_max + 1.0, kScaleBottom, kScaleTop};
  axis step_axis = {0.0, total_steps, kLeft, kWidth - kRight};

  FILE *f = fopen(path, "w");
  if (!f) return 0;
  fprintf(f,
          "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
          "viewBox=\"0 0 %d %d\" font-family=\"%s\" fill=\"#222\">\n",
          kWidth, kHeight, kWidth, kHeight, kFont);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fafafa\"/>\n");
  text(f, kWidth / 2.0, 34, "middle", 19, "bold", title);

  /* Loss panel: a line per decade, fainter lines at 2..9 times it. */
  panel_frame(f, kLossTop, kLossBottom);
  for (int d = (int)loss_axis.lo; d <= (int)loss_axis.hi; ++d) {
    double y = map(&loss_axis, d);
    if (d > loss_axis.lo && d < loss_axis.hi) grid_line(f, y, "#d0d0d0");
    power_label(f, kLeft - 8, y + 5, 10, d);
    for (int m = 2; m <= 9 && d < loss_axis.hi; ++m)
      grid_line(f, map(&loss_axis, d + log10(m)), "#eeeeee");
  }
  fprintf(f,
          "<text transform=\"translate(28 %.1f) rotate(-90)\" text-anchor=\"middle\" "
          "font-size=\"14\">training loss (MSE, log scale)</text>\n",
          (kLossTop + kLossBottom) / 2.0);

  /* Scale panel: a line per power of two, labelled at a round interval. */
  panel_frame(f, kScaleTop, kScaleBottom);
  const int scale_label_step = (int)nice_step(scale_axis.hi - scale_axis.lo, 5);
  for (int e = (int)scale_axis.lo; e <= (int)scale_axis.hi; ++e) {
    double y = map(&scale_axis, e);
    if (e > scale_axis.lo && e < scale_axis.hi)
      grid_line(f, y, e % scale_label_step == 0 ? "#d0d0d0" : "#f0f0f0");
    if (e % scale_label_step == 0) power_label(f, kLeft - 8, y + 5, 2, e);
  }
  fprintf(f,
          "<text transform=\"translate(28 %.1f) rotate(-90)\" text-anchor=\"middle\" "
          "font-size=\"14\">loss scale (log2)</text>\n",
          (kScaleTop + kScaleBottom) / 2.0);

  /* The shared step axis, ticked under both panels, labelled under the
   * lower one. */
  const double step_tick = nice_step(total_steps, 8);
  for (double t = 0.0; t <= total_steps + 1e-9; t += step_tick) {
    double x = map(&step_axis, t);
    char label[32];
    snprintf(label, sizeof label, "%.0f", t);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#444\"/>\n", x,
            kLossBottom, x, kLossBottom + 5);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#444\"/>\n", x,
            kScaleBottom, x, kScaleBottom + 5);
    text(f, x, kLossBottom + 20, "middle", 13, "normal", label);
    text(f, x, kScaleBottom + 20, "middle", 13, "normal", label);
  }
  text(f, (kLeft + kWidth - kRight) / 2.0, kScaleBottom + 44, "middle", 14, "normal",
       "training step");

  for (int s = 0; s < count; ++s) {
    curve(f, &series[s], &step_axis, &loss_axis, 1);
    curve(f, &series[s], &step_axis, &scale_axis, 0);
  }

  /* Runs without a scaler share the line at scale 1, one hiding the
   * other: name them there. */
  char unscaled[128] = "";
  for (int s = 0; s < count; ++s) {
    const demo_result *r = series[s].result;
    int all_one = 1;
    for (int i = 0; i < r->points; ++i) all_one = all_one && r->scales[i] == 1.0;
    if (!all_one) continue;
    size_t used = strlen(unscaled);
    snprintf(unscaled + used, sizeof unscaled - used, "%s%s", used ? " and " : "", series[s].name);
  }
  if (unscaled[0]) {
    char note[192];
    snprintf(note, sizeof note, "%s: no scaler (scale 1)", unscaled);
    text(f, kWidth - kRight - 10, map(&scale_axis, 0.0) - 8, "end", 13, "normal", note);
  }

  /* Legend in the loss panel's upper right, where the loss has already
   * fallen away from. */
  const double lx = kWidth - kRight - 290, ly = kLossTop + 14;
  fprintf(f,
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"276\" height=\"%d\" fill=\"white\" "
          "fill-opacity=\"0.9\" stroke=\"#999\"/>\n",
          lx, ly, 14 + 24 * count);
  for (int s = 0; s < count; ++s) {
    double y = ly + 22 + 24 * s;
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
            "stroke-width=\"2.5\" stroke-dasharray=\"%s\"/>\n",
            lx + 12, y - 5, lx + 56, y - 5, series[s].colour,
            series[s].dash[0] ? series[s].dash : "none");
    text(f, lx + 66, y, "start", 14, "normal", series[s].label);
  }
  fprintf(f, "</svg>\n");
  return fclose(f) == 0;
}
