// Exceptions with no caller to go to (handoff/detail/report.hpp): printed to stderr with
// their true source, and keys cut short in every message.
#include <handoff/actor.hpp>
#include <handoff/detail/report.hpp>

#include <gtest/gtest.h>

#include <exception>
#include <stdexcept>
#include <string>

namespace {

TEST(Report, AShortKeyAppearsWholeAndALongOneIsCutWithItsLength) {
  EXPECT_EQ(handoff::detail::key_excerpt("player:42"), "player:42");
  const std::string huge(2 * 1024 * 1024, 'k');
  const std::string cut = handoff::detail::key_excerpt(huge);
  EXPECT_LT(cut.size(), 100U);
  EXPECT_EQ(cut.substr(0, handoff::detail::key_excerpt_bytes), huge.substr(0, handoff::detail::key_excerpt_bytes));
  EXPECT_NE(cut.find("2097152 bytes"), std::string::npos) << cut;
}

TEST(Report, AReportNamesItsSourceAndTheExceptionMessage) {
  testing::internal::CaptureStderr();
  handoff::detail::report_to_stderr(std::make_exception_ptr(std::runtime_error("boom")), "a test");
  handoff::detail::report_to_stderr(std::make_exception_ptr(42), "a test");
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("handoff: exception thrown by a test: boom"), std::string::npos) << out;
  EXPECT_NE(out.find("a test (not a std::exception)"), std::string::npos) << out;
}

TEST(Report, AnExceptionFromAnOnErrorHookIsReportedAsTheHookSNotTheHandlerS) {
  handoff::actor_options options;
  options.on_error = [](const std::exception_ptr&) { throw std::runtime_error("hook failed"); };
  handoff::actor<int> a{options, 0};
  testing::internal::CaptureStderr();
  a.post([](int&) { throw std::runtime_error("handler failed"); });
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("exception thrown by an actor's on_error hook: hook failed"), std::string::npos) << out;
  EXPECT_EQ(out.find("an actor handler"), std::string::npos) << out;
  EXPECT_EQ(a.ask([](int& s) { return s + 1; }).get(), 1) << "the actor is wedged";
}

}  // namespace
