// EXPECT_ERROR(statement, substring): the statement throws minigpt::Error, and the message (the
// text a user reads after "minigpt: error:") contains substring. Every error test checks what
// it says, not only that something was thrown.
#pragma once

#include "core/error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#define EXPECT_ERROR(statement, substring)                                             \
  EXPECT_THAT([&] { statement; },                                                      \
              ::testing::ThrowsMessage<::minigpt::Error>(::testing::HasSubstr(substring)))
