/* The running mean and variance of VecNormalize (src/running_stats.c),
 * folded in batch by batch, against the closed form: the pooled mean and
 * population variance of SB3's prior (count 1e-4 at mean 0, variance 1)
 * and every sample seen, in double. Batches of 1 to 9 rows, values spread
 * over several magnitudes. */
#include "running_stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define DIM 3
#define TOTAL 2000

int main(void) {
  srand(11);
  static float x[TOTAL * DIM];
  for (int i = 0; i < TOTAL * DIM; ++i)
    x[i] = (float)((rand() / (RAND_MAX + 1.0) - 0.3) * pow(10.0, i % DIM) + 5.0 * (i % DIM));
  double mean[DIM] = {0, 0, 0}, var[DIM] = {1, 1, 1};
  running_stats rs = {mean, var, 1e-4};
  int seen = 0, checks = 0;
  double worst = 0;
  while (seen < TOTAL) {
    int rows = 1 + rand() % 9;
    if (seen + rows > TOTAL) rows = TOTAL - seen;
    rl_rms_update(&rs, x + seen * DIM, (size_t)rows, DIM);
    seen += rows;
    for (int d = 0; d < DIM; ++d) {
      /* prior: 1e-4 samples at mean 0, variance 1 */
      double n = 1e-4, sum = 0;
      for (int r = 0; r < seen; ++r) sum += x[r * DIM + d];
      n += seen;
      const double m = sum / n;
      double m2 = 1e-4 * (1.0 + m * m);
      for (int r = 0; r < seen; ++r) m2 += (x[r * DIM + d] - m) * (x[r * DIM + d] - m);
      const double v = m2 / n;
      const double em = fabs(rs.mean[d] - m) / (1 + fabs(m)), ev = fabs(rs.var[d] - v) / v;
      worst = fmax(worst, fmax(em, ev));
      if (!(em < 1e-10 && ev < 1e-10) || fabs(rs.count - n) > 1e-9) {
        printf("FAIL after %d samples, column %d: mean %.17g vs %.17g, var %.17g vs %.17g\n", seen,
               d, rs.mean[d], m, rs.var[d], v);
        return 1;
      }
      checks++;
    }
  }
  printf("running mean/var equal the pooled closed form: %d checks, worst relative %.2e\n", checks,
         worst);
  return 0;
}
