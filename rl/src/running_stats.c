#include "running_stats.h"

void rl_rms_update(running_stats *rs, const float *x, size_t rows, size_t dim) {
  const double batch = (double)rows;
  for (size_t d = 0; d < dim; ++d) {
    double m = 0, v = 0;
    for (size_t r = 0; r < rows; ++r) m += x[r * dim + d];
    m /= batch;
    for (size_t r = 0; r < rows; ++r) {
      const double t = x[r * dim + d] - m;
      v += t * t;
    }
    v /= batch;
    const double delta = m - rs->mean[d], tot = rs->count + batch;
    const double m2 = rs->var[d] * rs->count + v * batch + delta * delta * rs->count * batch / tot;
    rs->mean[d] += delta * batch / tot;
    rs->var[d] = m2 / tot;
  }
  rs->count += batch;
}
