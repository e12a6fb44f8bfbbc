/*
 * task.c -- the demo's task: a procedural image and the Fourier features of
 * its pixel coordinates.
 *
 * The image mixes what a neural field finds easy (smooth gradients, shading)
 * with what it finds hard (hard edges, a fine checkerboard), so the PSNR it
 * reaches says something about precision: rounding in a weak format shows
 * up first in the fine detail. Everything is computed from the pixel
 * position alone, so every machine trains on the same picture.
 */
#include <math.h>
#include <stdlib.h>

#include "demo.h"

static const double kPi = 3.14159265358979323846;

uint64_t demo_random_u64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double next_normal(uint64_t *state) {
  /* Box-Muller; the +1 keeps log away from 0. */
  double a = ((double)(demo_random_u64(state) >> 11) + 1.0) / 9007199254740993.0;
  double b = (double)(demo_random_u64(state) >> 11) / 9007199254740992.0;
  return sqrt(-2.0 * log(a)) * cos(2.0 * kPi * b);
}

/* Which side of the line p0->p1 the point lies on (sign of the cross
 * product). */
static double edge(double x0, double y0, double x1, double y1, double x, double y) {
  return (x1 - x0) * (y - y0) - (y1 - y0) * (x - x0);
}

static void pixel(double u, double v, float rgb[3]) {
  /* Smooth background: a diagonal colour ramp with a slow wave in it. */
  double r = 0.10 + 0.55 * u + 0.05 * sin(2.0 * kPi * (u + v));
  double g = 0.18 + 0.45 * (1.0 - v);
  double b = 0.40 + 0.45 * v * (1.0 - u);

  /* A triangle with hard edges. */
  double e0 = edge(0.06, 0.94, 0.46, 0.94, u, v);
  double e1 = edge(0.46, 0.94, 0.26, 0.56, u, v);
  double e2 = edge(0.26, 0.56, 0.06, 0.94, u, v);
  if ((e0 <= 0 && e1 <= 0 && e2 <= 0) || (e0 >= 0 && e1 >= 0 && e2 >= 0)) {
    r = 0.85, g = 0.20, b = 0.25;
  }

  /* A shaded disc: a hard rim around a smooth radial gradient. */
  double dx = u - 0.30, dy = v - 0.32;
  double d = sqrt(dx * dx + dy * dy);
  if (d < 0.19) {
    r = 1.0, g = 0.85 - 1.8 * d, b = 0.20 + 0.8 * d;
  }

  /* A thin dark ring: two edges a few pixels apart. */
  dx = u - 0.70, dy = v - 0.66;
  d = sqrt(dx * dx + dy * dy);
  if (d > 0.17 && d < 0.21) {
    r = 0.08, g = 0.10, b = 0.30;
  }

  /* A fine checkerboard, 1/16 of the image per cell: the hardest part. */
  if (u > 0.58 && u < 0.92 && v > 0.08 && v < 0.38) {
    int cell = (int)floor(u * 16.0) + (int)floor(v * 16.0);
    if (cell % 2 == 0) {
      r = 0.95, g = 0.95, b = 0.90;
    } else {
      r = 0.05, g = 0.45, b = 0.45;
    }
  }
  rgb[0] = (float)r, rgb[1] = (float)g, rgb[2] = (float)b;
}

int demo_task_make(const demo_config *config, demo_task *task) {
  const int size = config->size;
  const long pixels = (long)size * size;
  task->size = size;
  task->inputs = 2 * config->frequencies;
  task->features = malloc(sizeof(float) * (size_t)pixels * (size_t)task->inputs);
  task->target = malloc(sizeof(float) * (size_t)pixels * 3);
  double *freq = malloc(sizeof(double) * 2 * (size_t)config->frequencies);
  if (!task->features || !task->target || !freq) {
    free(freq);
    demo_task_free(task);
    return 0;
  }
  /* Random Fourier features (Tancik et al. 2020): a plain MLP on (x, y)
   * cannot fit fine detail; sin/cos of random projections let it. */
  uint64_t rng = 20240611u;
  for (int i = 0; i < 2 * config->frequencies; ++i)
    freq[i] = config->fourier_scale * next_normal(&rng);

  for (int y = 0; y < size; ++y) {
    for (int x = 0; x < size; ++x) {
      const long p = (long)y * size + x;
      const double u = (x + 0.5) / size, v = (y + 0.5) / size;
      pixel(u, v, task->target + 3 * p);
      float *f = task->features + p * task->inputs;
      for (int j = 0; j < config->frequencies; ++j) {
        double phase = 2.0 * kPi * (freq[2 * j] * u + freq[2 * j + 1] * v);
        f[2 * j] = (float)cos(phase);
        f[2 * j + 1] = (float)sin(phase);
      }
    }
  }
  free(freq);
  return 1;
}

void demo_task_free(demo_task *task) {
  free(task->features);
  free(task->target);
  task->features = NULL;
  task->target = NULL;
}

double demo_psnr(const float *image, const float *reference, long count) {
  double sum = 0.0;
  for (long i = 0; i < count; ++i) {
    double value = image[i] < 0.0f ? 0.0 : image[i] > 1.0f ? 1.0 : image[i];
    double diff = value - reference[i];
    sum += diff * diff;
  }
  double mse = sum / (double)count;
  return mse > 0.0 ? 10.0 * log10(1.0 / mse) : INFINITY;
}
