#pragma once
#include "weft/train/engine.hpp"
