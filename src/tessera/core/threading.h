#pragma once

namespace tessera {

// One OpenMP pool serves our kernels and oneDNN alike; two competing pools would oversubscribe
// the cores.
int num_threads();
void set_num_threads(int n);

}  // namespace tessera
