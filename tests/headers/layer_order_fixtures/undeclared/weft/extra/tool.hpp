#pragma once
#include "weft/core/error.hpp"
