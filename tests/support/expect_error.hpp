#pragma once
// Asserting on dpl::Error messages: every rejected input must say which op failed and what it
// expected and received, so tests match the text, not just the exception type.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "dpl/core/error.hpp"

namespace dpl::test {

/// The message of the dpl::Error that fn throws. When fn returns normally the result is a
/// sentinel that no message matcher in the tests accepts, so the assertion fails and shows it.
/// Any other exception type escapes and fails the test on its own.
template <typename Fn>
std::string error_message(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no dpl::Error was thrown>";
}

}  // namespace dpl::test

/// Expects `statement` to throw dpl::Error whose message satisfies `matcher`.
#define DPL_EXPECT_ERROR(statement, matcher) \
  EXPECT_THAT(::dpl::test::error_message([&] { statement; }), matcher)
