// A small MPI program that fails in a chosen way, so that tests can watch how the whole job
// ends. In the timeout modes rank 0 has a 2 s timeout and rank 1, with 60 s, waits for a message
// rank 0 never sends:
//   timeout          rank 0 waits in a recv of a message rank 1 never sends
//   wait-timeout     the same through start_recv and wait
//   barrier-timeout  rank 0 waits at a barrier rank 1 never enters
//   exit             rank 1 exits without a word while the others wait at a barrier
//   exit-at-start    rank 1 exits without a word before MPI starts, while the others start it
//   all-reduce DIR   every rank, with a 3 s timeout and its flight record in DIR, all-reduces
//                    over dp in a loop for 30 s, until the test stops one of them (SIGSTOP)
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "tessera/comm/flight_recorder.h"
#include "tessera/comm/mesh.h"
#include "tessera/comm/world.h"
#include "tessera/core/error.h"

int main(int argc, char** argv) {
  using namespace tessera;
  const char* mode = argc > 1 ? argv[1] : "";
  const char* launcher_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (std::strcmp(mode, "exit-at-start") == 0 && launcher_rank && std::atoi(launcher_rank) == 1) {
    _exit(3);
  }
  comm::Communicator& world = comm::init_world(argc, argv);
  try {
    const bool timeout = std::strcmp(mode, "timeout") == 0;
    const bool wait_timeout = std::strcmp(mode, "wait-timeout") == 0;
    const bool barrier_timeout = std::strcmp(mode, "barrier-timeout") == 0;
    if (timeout || wait_timeout || barrier_timeout) {
      comm::set_timeout_seconds(world.rank() == 0 ? 2 : 60);
      float buffer[4];
      if (world.rank() != 0) {
        world.recv(buffer, 4, DType::f32, 0, 7);
      } else if (timeout) {
        world.recv(buffer, 4, DType::f32, 1, 7);
      } else if (wait_timeout) {
        comm::Request request = world.start_recv(buffer, 4, DType::f32, 1, 7);
        world.wait(request);
      } else {
        world.barrier();
      }
    } else if (std::strcmp(mode, "exit") == 0 || std::strcmp(mode, "exit-at-start") == 0) {
      comm::set_timeout_seconds(60);
      // "exit": every rank has finished starting (its stop handler installed) before rank 1
      // dies; "exit-at-start" is the case of a rank that dies while the others start.
      if (std::strcmp(mode, "exit") == 0) world.barrier();
      if (world.rank() == 1) _exit(3);
      world.barrier();
    } else if (std::strcmp(mode, "all-reduce") == 0 && argc > 2) {
      comm::set_timeout_seconds(3);
      const comm::Mesh mesh(world, {.dp = world.size()});
      comm::start_flight_recorder(argv[2]);
      float buffer[256] = {};
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (std::chrono::steady_clock::now() < end) {
        mesh.dp().all_reduce(buffer, 256, DType::f32);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    } else {
      fail(
          "unknown mode '{}' (expected timeout, wait-timeout, barrier-timeout, exit, "
          "exit-at-start or all-reduce DIR)",
          mode);
    }
  } catch (const Error& e) {
    comm::abort_job(e.what());
  }
  return 0;
}
