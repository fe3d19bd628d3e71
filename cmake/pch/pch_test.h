// The tests' precompiled header: the common one and GoogleTest (cmake/pch.cmake).
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pch.h"
