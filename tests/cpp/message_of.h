// The message of an exception a test expects: what() of the E that fn throws, or "" when it
// throws none (anything else propagates and fails the test).
#pragma once

#include <string>

template <class E, class F>
std::string message_of(F&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}
