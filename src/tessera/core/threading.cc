#include "tessera/core/threading.h"

#include <omp.h>

#include "tessera/core/error.h"

namespace tessera {

int num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  check(n >= 1, "thread count must be at least 1, got {}", n);
  omp_set_num_threads(n);
}

}  // namespace tessera
