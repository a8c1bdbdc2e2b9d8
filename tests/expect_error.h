// Checks that a call fails the way users are promised: a tessera::Error with a one-line message
// that names what is wrong.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "tessera/core/error.h"

namespace tessera::testing {

// The message of the Error that `body` throws, or a note that it threw none.
template <typename Body>
std::string error_of(Body body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no tessera::Error thrown>";
}

// Runs `body`, expecting an Error whose one-line message contains every one of `parts`.
template <typename Body>
void expect_error(Body body, std::initializer_list<std::string> parts) {
  try {
    body();
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    for (const std::string& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos)
          << "message '" << message << "' lacks '" << part << "'";
    }
    return;
  }
  ADD_FAILURE() << "no tessera::Error thrown";
}

}  // namespace tessera::testing
