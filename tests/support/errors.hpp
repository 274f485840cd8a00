#pragma once
// Test helpers for error messages: the message of the exception a call
// throws, and that a message names everything a user needs.

#include <gtest/gtest.h>

#include <exception>
#include <initializer_list>
#include <string>

namespace nanscope::test {

// The what() of the E that fn throws; a test failure (and "") when it throws
// something else or nothing.
template <typename E, typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "no exception";
  return {};
}

inline void expect_contains(const std::string& message, std::initializer_list<std::string> needles) {
  for (const auto& n : needles) EXPECT_NE(message.find(n), std::string::npos) << "\"" << n << "\" not in: " << message;
}

}  // namespace nanscope::test
