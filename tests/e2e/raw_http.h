// A client that writes raw bytes to a server and reads what comes back, for requests no
// well-behaved HTTP library would send: slow, truncated, pipelined, malformed, HTTP/1.0.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>

namespace tessera::testing {

class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) throw std::runtime_error("socket() failed");
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(uint16_t(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
      close(fd_);
      throw std::runtime_error("connect() failed");
    }
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~RawConnection() { close(fd_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  // False once the server has closed (or reset) the connection.
  bool send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += size_t(n);
    }
    return true;
  }
  void finish_sending() { shutdown(fd_, SHUT_WR); }

  // Reads until the server closes the connection or `timeout` passes; `closed()` tells which.
  std::string read_all(std::chrono::milliseconds timeout) {
    return read_until([](const std::string&) { return false; }, timeout);
  }
  // Reads until `done(received)` holds, the connection closes or `timeout` passes.
  template <typename Done>
  std::string read_until(Done done, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!closed_ && !done(received_)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, int(left.count())) <= 0) break;
      char buffer[65536];
      const ssize_t n = recv(fd_, buffer, sizeof buffer, 0);
      if (n <= 0) {
        closed_ = true;
      } else {
        received_.append(buffer, size_t(n));
      }
    }
    return received_;
  }
  bool closed() const { return closed_; }
  const std::string& received() const { return received_; }

 private:
  int fd_ = -1;
  bool closed_ = false;
  std::string received_;
};

// The status code of the first response in `text`, or 0.
inline int status_of(const std::string& text) {
  if (text.rfind("HTTP/1.", 0) != 0 || text.size() < 12) return 0;
  return std::stoi(text.substr(9, 3));
}

}  // namespace tessera::testing
