// A small MPI program that fails in a chosen way, so that tests can watch how the whole job
// ends:
//   timeout  rank 0 waits (2 s timeout) for a message rank 1 never sends
//   exit     rank 1 exits without a word while the others wait at a barrier
#include <unistd.h>

#include <cstring>

#include "tessera/core/error.h"
#include "tessera/dist/launch.h"

int main(int argc, char** argv) {
  using namespace tessera;
  dist::Communicator& world = dist::init_world(argc, argv);
  dist::install_stop_handler();
  const char* mode = argc > 1 ? argv[1] : "";
  try {
    if (std::strcmp(mode, "timeout") == 0) {
      dist::set_timeout_seconds(world.rank() == 0 ? 2 : 60);
      float buffer[4];
      if (world.rank() == 0) {
        world.recv(buffer, 4, DType::f32, 1, 7);
      } else {
        world.barrier();
      }
    } else if (std::strcmp(mode, "exit") == 0) {
      dist::set_timeout_seconds(60);
      if (world.rank() == 1) _exit(3);
      world.barrier();
    } else {
      fail("unknown mode '{}' (expected timeout or exit)", mode);
    }
  } catch (const Error& e) {
    dist::abort_job(e.what());
  }
  return 0;
}
