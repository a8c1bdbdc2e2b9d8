// SIGTERM and SIGINT, the signals that ask a process to stop, are taken by one thread of their own
// rather than by an asynchronous handler. A handler runs on whichever thread the signal interrupts,
// and the kernel writes the handler's frame below that thread's stack pointer, which a JIT-compiled
// matmul kernel (oneDNN's sgemm) may have pointed into the heap: a handler that returns leaves the
// heap corrupted. The thread takes each signal with sigwaitinfo and runs the process's handler as
// ordinary code.
#pragma once

#include <sys/types.h>

#include <functional>

namespace tessera {

// What the stop-signal thread does with a signal; `sender` is the pid that sent it (0 when the
// kernel does not say). It returns false to leave the signal its default action: the process ends
// as the signal would have ended it.
using StopSignalHandler = std::function<bool(int signal, pid_t sender)>;

// Blocks SIGTERM and SIGINT in the calling thread, which every thread it starts afterwards
// inherits, and starts the thread that takes them. Call it first in main, before any other thread
// starts (MPI's included); later calls do nothing.
void take_stop_signals();

// Makes `handler` what the next stop signals do, and returns the handler it replaces; once it
// returns, the replaced handler is not running. An empty handler leaves every signal its default
// action. A handler must not call on_stop_signal itself.
StopSignalHandler on_stop_signal(StopSignalHandler handler);

// For a child between fork and exec: the program it runs would otherwise start with the stop
// signals blocked.
void unblock_stop_signals();

}  // namespace tessera
