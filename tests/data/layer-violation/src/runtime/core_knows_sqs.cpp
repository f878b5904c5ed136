// A deliberate layer violation: the container core including a source (see
// tests/CMakeLists.txt, the layer check must refuse it).
#include "sqs/codec.hpp"
